//! zones.toml: schema, lookup order, loading and validation. (Being written.)
