//! hecloud's RNS/NTT engine (work in progress).
#![deny(missing_docs)]
