//! Appending the bytes of an upload to its part file.
//!
//! A fresh part is written with `O_DIRECT` on Linux: the bytes go from a
//! reused, page-aligned staging buffer straight to the device instead of
//! being copied into newly allocated page-cache pages and written back from
//! there. On the virtual machine we measure on, that copy into fresh
//! page-cache pages, not the disk, was the slow part of an upload: writing
//! 11 MiB took from 2 to 60 ms, and a profile put 23 ms of CPU per
//! two-ciphertext job in it. A direct write costs one memcpy into a warm
//! buffer, then waits on the device with the CPU free. A blob is read back
//! rarely (jobs get their inputs decoded while they stream in), so skipping
//! the cache loses little.
//!
//! The waiting is done by a writer thread per part: the upload goes on
//! filling the next staging buffer while the device writes the last one.
//! Waiting in the upload itself held each 11 MiB ciphertext upload for
//! about 14 ms (bench service, two uploads at once).
//!
//! The last partial block, a resumed upload (its offset need not be
//! aligned) and file systems that refuse `O_DIRECT` (tmpfs, other systems)
//! go through the page cache, with writeback started as the part grows so
//! that the closing fsync finds little left to do.

use std::fs::{File, OpenOptions};
use std::io::{Seek, Write};
use std::path::Path;
use std::sync::Mutex;

/// Alignment of direct I/O: offsets, lengths and buffer addresses (covers
/// the 512-byte and 4 KiB logical blocks of common devices).
const ALIGN: usize = 4096;
/// Staged bytes written in one direct write.
const STAGE: usize = 1 << 20;
/// Bytes written through the page cache between two writeback starts.
const WRITEBACK_STEP: u64 = 1 << 20;
/// Staging buffers kept for reuse (the pages stay mapped, so reusing one
/// costs no page faults).
const POOL_MAX: usize = 8;

static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// A page-aligned staging buffer of `STAGE` bytes, from the pool.
struct Staging {
    buf: Vec<u8>,
    /// Start of the aligned region in `buf`.
    start: usize,
    /// Bytes staged.
    len: usize,
}

impl Staging {
    fn take() -> Self {
        let buf = POOL
            .lock()
            .ok()
            .and_then(|mut p| p.pop())
            .unwrap_or_else(|| vec![0; STAGE + ALIGN]);
        let start = (ALIGN - buf.as_ptr() as usize % ALIGN) % ALIGN;
        Self { buf, start, len: 0 }
    }

    fn region(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + STAGE]
    }

    fn staged(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }
}

/// Staged blocks queued for a writer thread beyond the one it writes.
const QUEUED: usize = 2;

/// Staged bytes for the writer thread, and where they go in the part.
struct Block {
    staging: Staging,
    at: u64,
    /// The part's end: its final partial block goes through the page cache.
    last: bool,
}

/// The writer thread of a direct part.
struct DirectWriter {
    tx: Option<std::sync::mpsc::SyncSender<Block>>,
    thread: Option<std::thread::JoinHandle<std::io::Result<File>>>,
}

impl DirectWriter {
    fn spawn(file: File, path: &Path) -> std::io::Result<Self> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Block>(QUEUED);
        let path = path.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("hecloud-part".into())
            .spawn(move || {
                // Opened once the device refuses a direct write.
                let mut buffered = None;
                let mut result = Ok(());
                for block in rx {
                    // After an error the rest is dropped; `finish` reports it.
                    if result.is_ok() {
                        result = write_block(&file, &path, &mut buffered, &block);
                    }
                }
                result.map(|()| file)
            })?;
        Ok(Self {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    fn send(&self, block: Block) -> std::io::Result<()> {
        let gone = || std::io::Error::other("the part's writer thread stopped");
        self.tx
            .as_ref()
            .ok_or_else(gone)?
            .send(block)
            .map_err(|_| gone())
    }

    /// Waits for every block sent; the file, or the first write error.
    fn join(mut self) -> std::io::Result<File> {
        self.tx = None;
        let thread = self.thread.take().expect("joined once");
        thread
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the part's writer thread panicked")))
    }
}

impl Drop for DirectWriter {
    /// A part dropped without `finish` still has its queued blocks written
    /// before anything else (a resumed upload) opens it.
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Writes one block: whole blocks direct, the final partial block (and
/// everything, once the device has refused a direct write) through the
/// page cache. Padding the final block instead would leave a window where a
/// crash keeps the zeros as if received.
fn write_block(
    direct: &File,
    path: &Path,
    buffered: &mut Option<File>,
    block: &Block,
) -> std::io::Result<()> {
    let data = block.staging.staged();
    let whole = if block.last {
        data.len() / ALIGN * ALIGN
    } else {
        data.len()
    };
    let mut from = 0;
    if buffered.is_none() {
        match write_all_at(direct, &data[..whole], block.at) {
            Ok(()) => from = whole,
            // Refused after all (a device with larger blocks, a file system
            // that takes the flag but not the write): go on buffered.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(e),
        }
    }
    if from < data.len() {
        let file = match buffered {
            Some(f) => f,
            None => buffered.insert(OpenOptions::new().write(true).open(path)?),
        };
        write_all_at(file, &data[from..], block.at + from as u64)?;
    }
    Ok(())
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Ok(mut p) = POOL.lock()
            && p.len() < POOL_MAX
        {
            p.push(std::mem::take(&mut self.buf));
        }
    }
}

enum Mode {
    /// `O_DIRECT`: full staging buffers go to the writer thread.
    Direct {
        staging: Staging,
        writer: DirectWriter,
    },
    /// Through the page cache.
    Buffered { file: File, written_back: u64 },
}

/// Appends to a part file; [`PartWriter::finish`] makes what was written
/// durable.
pub struct PartWriter {
    mode: Mode,
    /// Bytes of the part held (written or staged).
    held: u64,
}

impl std::fmt::Debug for PartWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartWriter")
            .field("direct", &matches!(self.mode, Mode::Direct { .. }))
            .field("held", &self.held)
            .finish()
    }
}

impl PartWriter {
    /// Opens (creating if needed) `path` for appending at `offset`
    /// (anything past it, from an interrupted write, is cut off).
    pub fn open(path: &Path, offset: u64) -> std::io::Result<Self> {
        if offset == 0
            && let Some(file) = open_direct(path)
        {
            file.set_len(0)?;
            return Ok(Self {
                mode: Mode::Direct {
                    staging: Staging::take(),
                    writer: DirectWriter::spawn(file, path)?,
                },
                held: 0,
            });
        }
        Ok(Self {
            mode: Mode::Buffered {
                file: open_buffered(path, offset)?,
                written_back: offset,
            },
            held: offset,
        })
    }

    /// Appends `data`.
    pub fn write(&mut self, mut data: &[u8]) -> std::io::Result<()> {
        while !data.is_empty() {
            match &mut self.mode {
                Mode::Direct { staging, .. } => {
                    let n = (STAGE - staging.len).min(data.len());
                    let at = staging.len;
                    staging.region()[at..at + n].copy_from_slice(&data[..n]);
                    staging.len += n;
                    self.held += n as u64;
                    data = &data[n..];
                    if staging.len == STAGE {
                        self.flush_staged(false)?;
                    }
                }
                Mode::Buffered { file, written_back } => {
                    file.write_all(data)?;
                    self.held += data.len() as u64;
                    if self.held - *written_back >= WRITEBACK_STEP {
                        start_writeback(file, *written_back, self.held - *written_back);
                        *written_back = self.held;
                    }
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Hands the staged bytes to the writer thread.
    fn flush_staged(&mut self, last: bool) -> std::io::Result<()> {
        let Mode::Direct { staging, writer } = &mut self.mode else {
            return Ok(());
        };
        if staging.len == 0 {
            return Ok(());
        }
        let at = self.held - staging.len as u64;
        let staging = std::mem::replace(staging, Staging::take());
        writer.send(Block { staging, at, last })
    }

    /// Bytes of the part held.
    pub fn len(&self) -> u64 {
        self.held
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.held == 0
    }

    /// Writes what is staged and fsyncs: every byte passed to
    /// [`Self::write`] is then durable.
    pub fn finish(mut self) -> std::io::Result<()> {
        self.flush_staged(true)?;
        match self.mode {
            // An fsync of either descriptor covers the buffered tail too.
            Mode::Direct { writer, .. } => writer.join()?.sync_all(),
            Mode::Buffered { file, .. } => file.sync_all(),
        }
    }
}

#[cfg(unix)]
fn write_all_at(file: &File, buf: &[u8], at: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, buf, at)
}

#[cfg(not(unix))]
fn write_all_at(mut file: &File, buf: &[u8], at: u64) -> std::io::Result<()> {
    file.seek(std::io::SeekFrom::Start(at))?;
    file.write_all(buf)
}

/// Part and blob files are readable by the server's user only, whatever
/// the umask.
#[cfg(unix)]
fn private(o: &mut OpenOptions) -> &mut OpenOptions {
    std::os::unix::fs::OpenOptionsExt::mode(o, 0o600)
}

#[cfg(not(unix))]
fn private(o: &mut OpenOptions) -> &mut OpenOptions {
    o
}

fn open_buffered(path: &Path, offset: u64) -> std::io::Result<File> {
    let mut f = private(OpenOptions::new().write(true).create(true).truncate(false)).open(path)?;
    f.set_len(offset)?;
    f.seek(std::io::SeekFrom::Start(offset))?;
    Ok(f)
}

#[cfg(target_os = "linux")]
fn open_direct(path: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    private(OpenOptions::new().write(true).create(true).truncate(false))
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .ok()
}

#[cfg(not(target_os = "linux"))]
fn open_direct(_: &Path) -> Option<File> {
    None
}

/// Starts writing `len` bytes of `file` from `offset` to disk without
/// waiting (Linux `sync_file_range`; elsewhere a no-op). Durability still
/// rests on the fsync that follows.
#[cfg(target_os = "linux")]
fn start_writeback(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is open for the duration of the call, which
    // only schedules I/O on it; a failure is harmless (the fsync follows).
    unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            offset as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_: &File, _: u64, _: u64) {}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::RngCore;

    /// `n` bytes from the test's replayable random stream.
    fn random(n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        hecloud_math::testing::rng().fill_bytes(&mut v);
        v
    }

    /// Writes `data` in chunks of `chunk` bytes from `offset` on, finishes.
    fn write_in(path: &Path, data: &[u8], offset: usize, chunk: usize) -> u64 {
        let mut w = PartWriter::open(path, offset as u64).unwrap();
        for c in data[offset..].chunks(chunk) {
            w.write(c).unwrap();
        }
        let held = w.len();
        w.finish().unwrap();
        held
    }

    #[test]
    fn parts_hold_exactly_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        // Around the alignment and the staging size, in odd chunk sizes.
        for len in [
            1,
            ALIGN - 1,
            ALIGN,
            ALIGN + 1,
            STAGE - 1,
            STAGE,
            STAGE + 1,
            3 * STAGE + 123,
        ] {
            for chunk in [1000, ALIGN, STAGE + 7] {
                let data = random(len);
                File::create(&path).unwrap();
                assert_eq!(write_in(&path, &data, 0, chunk), len as u64);
                assert_eq!(
                    std::fs::read(&path).unwrap(),
                    data,
                    "len {len} chunk {chunk}"
                );
            }
        }
    }

    #[test]
    fn an_interrupted_part_resumes_where_it_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        let data = random(2 * STAGE + 5000);
        File::create(&path).unwrap();
        // The first attempt stops at an unaligned offset.
        let stop = STAGE + 777;
        assert_eq!(write_in(&path, &data[..stop], 0, 65536), stop as u64);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), stop as u64);
        // A stale tail past the resume point is cut off.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"stale")
            .unwrap();
        assert_eq!(write_in(&path, &data, stop, 100_000), data.len() as u64);
        assert_eq!(std::fs::read(&path).unwrap(), data);
    }

    /// Dropped without `finish` (an upload that failed), a part still gets
    /// every block it queued before anything can reopen it.
    #[test]
    fn a_dropped_part_writes_what_it_queued() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        File::create(&path).unwrap();
        let data = random(4 * STAGE);
        let mut w = PartWriter::open(&path, 0).unwrap();
        w.write(&data).unwrap();
        drop(w);
        assert_eq!(std::fs::read(&path).unwrap(), data);
    }

    #[test]
    fn an_empty_part_stays_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        File::create(&path).unwrap();
        let w = PartWriter::open(&path, 0).unwrap();
        assert!(w.is_empty());
        w.finish().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    }
}
