//! Configuration: loaded by the `shepherd-config` crate (re-exported here,
//! so `shepherd::config::Config` stays the one name), plus what only the
//! binary needs from it: the store's settings.

pub use shepherd_config::*;
use shepherd_store::{StoreConfig, SyncMode};

/// The store settings a configuration names.
pub fn store_config(config: &Config) -> StoreConfig {
    let mut c = StoreConfig::new(config.database_url.clone());
    c.sqlite_sync = match config.sqlite_sync {
        SqliteSync::Normal => SyncMode::Normal,
        SqliteSync::Full => SyncMode::Full,
    };
    c.pg_pool_size = config.pg_pool_size;
    c.pg_schema = config.pg_schema.clone();
    c
}
