//! Each product's keys, built once and shared between its requests.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use super::{ProductId, ProductKeys};

/// Each product's keys, built once and shared: every deduction needs its product's two
/// dozen keys, and building them is a few dozen allocations a request. Bounded: past
/// [`KeyCache::MOST`] products it starts again from empty.
#[derive(Debug, Default)]
pub struct KeyCache {
    products: RwLock<HashMap<ProductId, Arc<ProductKeys>>>,
}

impl KeyCache {
    /// Most products kept.
    pub const MOST: usize = 4096;

    /// `product`'s keys.
    pub fn product(&self, product: &ProductId) -> Arc<ProductKeys> {
        let products = self.products.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(keys) = products.get(product) {
            return Arc::clone(keys);
        }
        drop(products);
        let keys = Arc::new(ProductKeys::new(product));
        let mut products = self
            .products
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if products.len() >= Self::MOST {
            products.clear();
        }
        products.insert(product.clone(), Arc::clone(&keys));
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_cache_builds_a_products_keys_once_and_stays_bounded() {
        let cache = KeyCache::default();
        let id = ProductId::parse("101").unwrap();
        let first = cache.product(&id);
        let again = cache.product(&id);
        assert!(Arc::ptr_eq(&first, &again), "built twice");
        assert!(Arc::ptr_eq(&first.whole(), &again.whole()));
        assert_eq!(first.whole().stock, ProductKeys::new(&id).whole().stock);
        for n in 0..KeyCache::MOST + 10 {
            let other = ProductId::parse(&format!("p{n}")).unwrap();
            assert_eq!(cache.product(&other).product, other);
        }
        let kept = cache.products.read().unwrap().len();
        assert!(kept <= KeyCache::MOST, "{kept} products kept");
    }
}
