//! SQL stores.
