//! Key custody: key material, derivations and (to come) the providers that keep the root key in
//! an OS credential store.

pub mod material;

pub use material::{ChunkKey, PurposeKey, RootKey, SessionIdKey, WrongKeyLength};
