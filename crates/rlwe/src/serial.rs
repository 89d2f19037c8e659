//! A compact, versioned binary format for every RLWE object.
//!
//! Header (80 bytes, little endian):
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..4 | magic `HECL` |
//! | 4..6 | format version (u16, currently 5) |
//! | 6 | object kind (see [`Kind`]) |
//! | 7 | flags (bit 0: seeded — the uniform polynomials are given by seeds) |
//! | 8..40 | BLAKE3 hash of the parameter set |
//! | 40..44 | level (u32) |
//! | 44..52 | scale (f64 bits) |
//! | 52..56 | count (u32): components of a ciphertext, digits of a key |
//! | 56..64 | extra (u64): the Galois element of a Galois key, a BGV ciphertext's factor, a switching key's tag, else 0 |
//! | 64..80 | key id: the [`crate::KeyId`] of the secret the object belongs to (zero for plaintexts) |
//!
//! The body is polynomials and 32-byte seeds. A polynomial is its limbs in
//! order, each limb its N residues packed LSB first at the bit length of its
//! prime (N·bits/8 bytes: a 50-bit prime takes 50 bits, not 64). A seeded
//! ciphertext is its seed, then c_0: a decoder receiving it as a stream
//! expands c_1 from the seed while c_0 is still on its way.
//! A decoder checks the header against the parameters the object must belong
//! to and computes the exact body length from them *before* allocating; every
//! residue is checked against its prime. Nothing in the bytes is trusted.
//!
//! One module per concern: the header's fields and checks, packed limbs,
//! the ciphertext and plaintext codecs, the streaming decoder, the key
//! codecs.

mod ciphertext;
mod decoder;
mod header;
mod keys;
mod limbs;
#[cfg(test)]
mod tests;

pub(crate) use ciphertext::{CiphertextMeta, write_ciphertext_header};
pub use decoder::CiphertextDecoder;
pub use header::{
    FORMAT_VERSION, HEADER_LEN, Header, Kind, MAGIC, MAX_CIPHERTEXT_COMPONENTS, read_header,
};
pub use limbs::packed_poly_bytes;
pub(crate) use limbs::{pack_limb, residue_bits};
