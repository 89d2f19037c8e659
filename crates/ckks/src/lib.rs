//! # hecloud-ckks
//!
//! RNS-CKKS over the RLWE core (work in progress).
#![deny(missing_docs)]
