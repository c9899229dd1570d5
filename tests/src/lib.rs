//! Test harness. (Being written.)
