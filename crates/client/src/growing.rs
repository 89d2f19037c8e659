//! An object whose bytes are made while it is uploaded: a writer appends
//! them in order, and an upload ([`crate::UploadBody::Source`]) sends each
//! chunk as soon as its bytes exist, so making the object (such as
//! encrypting it, [`hecloud_rlwe::Encryptor::encrypt_sk_pieces`]) overlaps
//! with sending it.

use std::sync::{Arc, RwLock};

use tokio::sync::watch;

use crate::ObjectSource;

/// An object of a fixed length whose bytes are appended by its
/// [`ObjectWriter`] while it is being sent. The bytes are kept as they were
/// appended (no copy into one buffer) until the object is dropped.
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use hecloud_client::{GrowingObject, ObjectSource};
/// let (object, mut writer) = GrowingObject::new(6);
/// let mut made = object.made().unwrap();
/// writer.push(b"hec".to_vec()).unwrap();
/// assert_eq!(*made.borrow_and_update(), 3);
/// writer.push(b"lou".to_vec()).unwrap();
/// made.wait_for(|&n| n == 6).await.unwrap();
/// let mut dst = [0; 4];
/// object.write_at(2, &mut dst);
/// assert_eq!(&dst, b"clou");
/// # });
/// ```
pub struct GrowingObject {
    len: u64,
    /// The pieces appended so far, each with its offset.
    pieces: RwLock<Vec<(u64, Vec<u8>)>>,
    made: watch::Receiver<u64>,
}

/// Appends the bytes of a [`GrowingObject`]. Dropped before every byte is
/// appended, it abandons the object: an upload of it fails instead of
/// waiting for bytes that will never come.
pub struct ObjectWriter {
    object: Arc<GrowingObject>,
    at: u64,
    made: watch::Sender<u64>,
}

/// A piece that does not fit in the object ([`ObjectWriter::push`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a piece of {piece} bytes at offset {at} overruns an object of {len} bytes")]
pub struct Overrun {
    /// The piece's length.
    pub piece: usize,
    /// Where it would have gone.
    pub at: u64,
    /// The object's length.
    pub len: u64,
}

impl GrowingObject {
    /// An empty object of `len` bytes and its writer.
    pub fn new(len: u64) -> (Arc<Self>, ObjectWriter) {
        let (tx, rx) = watch::channel(0);
        let object = Arc::new(Self {
            len,
            pieces: RwLock::new(Vec::new()),
            made: rx,
        });
        let writer = ObjectWriter {
            object: object.clone(),
            at: 0,
            made: tx,
        };
        (object, writer)
    }

    /// Whether every byte has been appended.
    pub fn is_complete(&self) -> bool {
        *self.made.borrow() == self.len
    }
}

impl ObjectWriter {
    /// Appends `piece`; refused if it would overrun the object's length.
    pub fn push(&mut self, piece: Vec<u8>) -> Result<(), Overrun> {
        let len = self.object.len;
        if piece.len() as u64 > len - self.at {
            return Err(Overrun {
                piece: piece.len(),
                at: self.at,
                len,
            });
        }
        if piece.is_empty() {
            return Ok(());
        }
        let at = self.at;
        self.at += piece.len() as u64;
        self.object
            .pieces
            .write()
            .expect("pieces lock")
            .push((at, piece));
        self.made.send_replace(self.at);
        Ok(())
    }

    /// Bytes appended so far.
    pub fn written(&self) -> u64 {
        self.at
    }
}

impl ObjectSource for GrowingObject {
    fn byte_len(&self) -> u64 {
        self.len
    }

    /// # Panics
    /// If a byte of the range has not been appended yet (an upload waits
    /// for [`ObjectSource::made`] first).
    fn write_at(&self, offset: u64, dst: &mut [u8]) {
        let end = offset + dst.len() as u64;
        let pieces = self.pieces.read().expect("pieces lock");
        // The last piece starting at or before `offset`, then on.
        let first = pieces.partition_point(|(at, _)| *at <= offset).max(1) - 1;
        let mut filled = offset;
        for (at, piece) in &pieces[first..] {
            if filled >= end {
                break;
            }
            let piece_end = at + piece.len() as u64;
            let (from, to) = (filled.max(*at), end.min(piece_end));
            if from < to {
                dst[(from - offset) as usize..(to - offset) as usize]
                    .copy_from_slice(&piece[(from - at) as usize..(to - at) as usize]);
                filled = to;
            }
        }
        assert_eq!(
            filled, end,
            "bytes {offset}..{end} of a growing object asked for before they were made"
        );
    }

    fn made(&self) -> Option<watch::Receiver<u64>> {
        Some(self.made.clone())
    }
}

impl std::fmt::Debug for ObjectWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ObjectWriter({} of {} bytes)", self.at, self.object.len)
    }
}

impl std::fmt::Debug for GrowingObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GrowingObject({} of {} bytes)",
            *self.made.borrow(),
            self.len
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_across_pieces_read_back_what_was_pushed() {
        let data: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let (object, mut writer) = GrowingObject::new(1000);
        let cuts = [0, 1, 7, 300, 301, 999, 1000];
        for w in cuts.windows(2) {
            writer.push(data[w[0]..w[1]].to_vec()).unwrap();
        }
        assert!(object.is_complete());
        for (from, to) in [
            (0, 1000),
            (0, 1),
            (6, 8),
            (1, 300),
            (299, 302),
            (999, 1000),
            (5, 5),
        ] {
            let mut dst = vec![0; to - from];
            object.write_at(from as u64, &mut dst);
            assert_eq!(dst, data[from..to], "{from}..{to}");
        }
    }

    #[test]
    fn an_overrun_is_refused_and_a_dropped_writer_closes_the_progress() {
        let (object, mut writer) = GrowingObject::new(4);
        let made = object.made().unwrap();
        writer.push(vec![1, 2, 3]).unwrap();
        assert_eq!(
            writer.push(vec![4, 5]),
            Err(Overrun {
                piece: 2,
                at: 3,
                len: 4
            })
        );
        assert_eq!(writer.written(), 3);
        assert!(!object.is_complete());
        drop(writer);
        assert!(made.has_changed().is_err(), "the sender is gone");
        assert_eq!(*made.borrow(), 3);
    }

    #[test]
    #[should_panic(expected = "before they were made")]
    fn reading_unmade_bytes_panics() {
        let (object, mut writer) = GrowingObject::new(4);
        writer.push(vec![1, 2]).unwrap();
        object.write_at(1, &mut [0; 2]);
    }
}
