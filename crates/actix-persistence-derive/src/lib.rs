//! Derive.
