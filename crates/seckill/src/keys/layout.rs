//! Where a product's shards live, and the tags they are placed under.

use super::ProductId;

/// Where a product's shards live: the hash tag of each, recorded in the product's meta at
/// reset. An unsplit product is one shard under its own tag, `{101}`. A split one has
/// `{101/0}` … `{101/N-1}` on one Redis; on a Cluster, a tag may carry a suffix
/// (`{101/4.2}`) chosen so that the shards spread evenly over the masters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    tags: Vec<String>,
}

impl Layout {
    /// One shard, under the product's tag.
    pub fn unsplit(product: &ProductId) -> Self {
        Self {
            tags: vec![product.as_str().to_owned()],
        }
    }

    /// `shards` shards under the plain tags `101/0` … (one shard: the product's tag).
    pub fn plain(product: &ProductId, shards: u32) -> Self {
        if shards <= 1 {
            return Self::unsplit(product);
        }
        Self {
            tags: (0..shards).map(|i| shard_tag(product, i, 0)).collect(),
        }
    }

    /// From tags chosen by a placement; `None` unless every tag belongs to `product`.
    pub fn from_tags(product: &ProductId, tags: Vec<String>) -> Option<Self> {
        let prefix = format!("{product}/");
        let valid = |t: &String| {
            t.strip_prefix(&prefix).is_some_and(|rest| {
                !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit() || c == '.')
            })
        };
        (tags.len() > 1 && tags.iter().all(valid)).then_some(Self { tags })
    }

    /// As recorded in the meta hash: `shards`, and `tags` (comma-separated) when split.
    /// Meta without tags (written before placement existed) means the plain tags.
    pub fn from_meta(product: &ProductId, shards: u32, tags: Option<&str>) -> Self {
        if shards <= 1 {
            return Self::unsplit(product);
        }
        tags.map(|t| t.split(',').map(str::to_owned).collect())
            .and_then(|t: Vec<String>| Self::from_tags(product, t))
            .filter(|layout| layout.shards() == shards)
            .unwrap_or_else(|| Self::plain(product, shards))
    }

    pub fn shards(&self) -> u32 {
        self.tags.len() as u32
    }

    /// The tags, comma-separated, for the meta hash.
    pub fn to_meta(&self) -> String {
        self.tags.join(",")
    }

    pub fn tags(&self) -> &[String] {
        &self.tags
    }
}

/// A candidate tag for shard `index`: `101/3`, then `101/3.1`, `101/3.2`, … as the
/// placement looks for one whose slot is on the master it wants.
pub fn shard_tag(product: &ProductId, index: u32, attempt: u32) -> String {
    if attempt == 0 {
        format!("{product}/{index}")
    } else {
        format!("{product}/{index}.{attempt}")
    }
}
