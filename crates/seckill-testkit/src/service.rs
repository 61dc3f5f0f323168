//! One Redis and N instances of the service sharing it, as the tests start them.

use crate::{Api, Instance, RedisServer};

/// A durable `redis-server` and `instances` `seckill serve` processes on it.
pub struct Service {
    pub redis: RedisServer,
    pub instances: Vec<Instance>,
}

impl Service {
    /// `instances` instances of `bin` (`env!("CARGO_BIN_EXE_seckill")`), each with `args`.
    pub fn start(bin: &str, instances: usize, args: &[&str]) -> Self {
        let redis = RedisServer::start();
        let instances = (0..instances)
            .map(|_| Instance::start(bin, &redis.url(), args))
            .collect();
        Self { redis, instances }
    }

    /// A client of instance `i`.
    pub fn api(&self, i: usize) -> Api {
        self.instances[i].api()
    }

    /// A client of each instance, in order.
    pub fn apis(&self) -> Vec<Api> {
        self.instances.iter().map(Instance::api).collect()
    }

    /// A metric summed over every instance's `/metrics`.
    pub async fn metric(&self, name: &str) -> f64 {
        let mut total = 0.0;
        for api in self.apis() {
            total += api.metric(name).await;
        }
        total
    }
}
