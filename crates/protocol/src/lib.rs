//! # hecloud-protocol
//!
//! The wire format between client, proxy and server: versioned messages,
//! computation graphs and their validation. No I/O happens here.
#![deny(missing_docs)]
