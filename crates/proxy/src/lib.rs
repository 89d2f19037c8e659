//! # hecloud-proxy
//!
//! The secret-keeping core of the encryption proxy (issue 27): a trusted
//! proxy next to the server holds each client's HE keys, encrypts the
//! plaintext its clients send and decrypts their results, and answers
//! refresh requests for their jobs. This crate holds its secrets:
//!
//! * [`mod@seal`]: AES-256-GCM sealing at rest ([`SealingKey`], [`seal()`],
//!   [`unseal()`]) and [`SealedKeyStore`], one sealed key folder per
//!   tenant, unsealed into memory only;
//! * [`enclave`]: the TEE boundary, the [`Enclave`] trait holding every
//!   secret operation (CKKS real vectors and BGV integer vectors), one
//!   batch of operations per crossing, and [`PlainEnclave`] for machines
//!   without a TEE;
//! * [`attest`]: attestation reports through Linux configfs-tsm and the
//!   client's verification of an SEV-SNP report (signature, chain to a
//!   pinned AMD root, binding to the proxy's TLS key and its nonce, guest
//!   policy, measurement);
//! * [`fusion`]: the same operations run as one batched crossing and as
//!   one crossing each, counted and timed ([`measure_fusion`]);
//! * [`service`]: the proxy's gRPC service (`proto/proxy.proto`): TLS, its
//!   own tenant tokens, plaintext in and out, the server reached as each
//!   client's tenant, refresh requests answered inside the enclave
//!   ([`service::start`]);
//! * [`client`]: [`ProxyClient`], which checks a proxy's attestation,
//!   bound to the TLS key of its own connection, before it sends anything
//!   and refuses an unattested proxy unless allowed;
//! * [`rpc`]: the generated wire types.
//!
//! ## Trust model of this increment
//!
//! * [`PlainEnclave`] protects the keys **at rest only**: a stolen disk or
//!   backup holds sealed files, useless without the sealing key file, and a
//!   sealed file cannot be swapped between tenants or files or modified
//!   unnoticed. It does **not** protect anything from the host: without a
//!   TEE the operating system, its administrator and anything that reads
//!   the process's memory see the secret keys, the plaintexts and the
//!   sealing key (a file on the same host). It reports
//!   [`Attestation::Unattested`], and clients must refuse it unless told to
//!   allow an unattested proxy ([`attest::verify`]).
//! * In memory, secrets are zeroized on drop (sealing key, unsealed files,
//!   the tenants' secret keys, the plaintext values going into and coming
//!   out of the enclave) and never shown by `Debug` or in errors. The
//!   sealing key never leaves the enclave: new key folders are sealed
//!   inside it ([`EnclaveOp::SealFolder`]), and the host gets a tenant's
//!   public files for upload from it ([`EnclaveOp::PublicFiles`]).
//! * In a confidential VM (SEV-SNP, TDX), [`CvmEnclave`] serves reports
//!   from configfs-tsm ([`attest`]); the client verifies an SEV-SNP report
//!   fully (revocation when given AMD's CRL), and a TDX quote up to
//!   Intel's root (revocation when given Intel's CRLs) but for Intel's TCB
//!   status and QE identity. Neither has
//!   run on SEV-SNP or TDX hardware here.
//! * The network service terminates the client's TLS and sees plaintext
//!   (it stands for the TEE); the server sees ciphertexts and public keys
//!   only. `docs/proxy.md` states the whole trust model.

#![deny(missing_docs)]

pub mod attest;
pub mod client;
pub mod cvm;
pub mod enclave;
pub mod error;
pub mod fusion;
pub mod rpc;
pub mod seal;
pub mod service;

pub use client::{ProxyClient, ProxyClientError, RunInput, RunOutput};
pub use cvm::{CvmEnclave, ReportSource};
pub use enclave::{Attestation, Enclave, EnclaveOp, EnclaveReply, PlainEnclave, StreamTo};
pub use error::{ProxyError, Result};
pub use fusion::{FusionReport, measure_fusion};
pub use seal::{SealedFolder, SealedKeyStore, SealingKey, UnsealedFolder, seal, unseal};
pub use service::{ErrorKind, ProxyConfig, ProxyTenant, RunningProxy, ServiceError, TlsSource};
/// The wrapper zeroizing plaintext values on drop in
/// [`EnclaveOp::EncryptReal`], [`EnclaveOp::EncryptRealStreamed`], [`EnclaveOp::EncryptInts`],
/// [`EnclaveReply::Reals`] and [`EnclaveReply::Ints`] (re-exported so
/// that callers need not depend on `zeroize`).
pub use zeroize::Zeroizing;
