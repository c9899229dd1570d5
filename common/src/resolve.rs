//! Configuration + command line -> [`crate::plan::Plan`]. (Being written.)
