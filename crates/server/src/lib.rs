//! # hecloud-server
//!
//! The untrusted compute node: it stores public and evaluation keys and
//! ciphertexts per tenant and runs computation graphs on them.
#![deny(missing_docs)]
