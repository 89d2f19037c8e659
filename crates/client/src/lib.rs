//! # hecloud-client
//!
//! The client SDK: the secret key stays here; data is encrypted before it
//! leaves and decrypted after results come back.
#![deny(missing_docs)]
