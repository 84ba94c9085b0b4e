//! The on-disk chunk store.
