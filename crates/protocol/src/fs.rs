//! Atomic file writes for the client's and the server's private files
//! (secret keys, tokens, TLS keys): the one place besides the wire format
//! that client and server share, and the only I/O in this crate.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes a file readable only by its owner (0600 on Unix) atomically: see
/// [`write_atomic`].
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic(path, bytes, 0o600)
}

/// Replaces `path` with `bytes` atomically: a new temporary file beside it,
/// created with `mode` (on Unix, narrowed by the umask; never chmod-ed
/// after, so it is at no moment more readable than `mode`), written and
/// fsynced, then renamed over `path`, and the folder fsynced. Readers see
/// the old file or the new one, never a part; a failed write leaves no
/// temporary file.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    static SEQ: AtomicU64 = AtomicU64::new(0);

    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is not a file path", path.display()),
        )
    })?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{}",
        name.to_string_lossy(),
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let mut o = std::fs::OpenOptions::new();
    // `create_new`: never reuse (or follow a link at) a name that exists.
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let written = (|| -> std::io::Result<()> {
        let mut f = o.open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        // The rename is durable once the folder is.
        #[cfg(unix)]
        std::fs::File::open(dir)?.sync_all()?;
        Ok(())
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh empty folder under the system's temporary folder.
    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "hecloud-fs-{name}-{}-{}",
            std::process::id(),
            SEQ_TEST.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }
    static SEQ_TEST: AtomicU64 = AtomicU64::new(0);

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn write_private_is_0600_replaces_and_leaves_no_temporary_file() {
        let dir = scratch("private");
        let p = dir.join("secret.key");
        write_private(&p, b"first").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"first");
        // A file that was readable by others is replaced by a private one
        // (a new inode), not rewritten in place.
        #[cfg(unix)]
        {
            use std::os::unix::fs::{MetadataExt, PermissionsExt};
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&p), 0o600);
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
            let before = std::fs::metadata(&p).unwrap().ino();
            // Held open: the old content stays whole for a reader.
            let old = std::fs::File::open(&p).unwrap();
            write_private(&p, b"second, longer").unwrap();
            assert_eq!(mode(&p), 0o600);
            assert_ne!(std::fs::metadata(&p).unwrap().ino(), before);
            let mut seen = String::new();
            std::io::Read::read_to_string(&mut &old, &mut seen).unwrap();
            assert_eq!(seen, "first");
        }
        #[cfg(not(unix))]
        write_private(&p, b"second, longer").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"second, longer");
        assert_eq!(names(&dir), ["secret.key"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary_file() {
        let dir = scratch("failed");
        let p = dir.join("token");
        write_private(&p, b"kept").unwrap();
        // Renaming a file over a folder fails after the temporary file is
        // written.
        let blocked = dir.join("blocked");
        std::fs::create_dir(&blocked).unwrap();
        std::fs::write(blocked.join("inside"), b"x").unwrap();
        assert!(write_private(&blocked, b"lost").is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"kept");
        assert_eq!(names(&dir), ["blocked", "token"]);
        assert!(write_private(Path::new("/"), b"x").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
