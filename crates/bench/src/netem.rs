//! Wide-area link emulation for experiments that run client and server in
//! one process: a TCP relay on 127.0.0.1 whose two directions behave like an
//! asymmetric link with a round-trip delay, so that a service's figures
//! include what a real network would add.
//!
//! Two ways to shape ([`Method`]): the Linux kernel (`tc` on `lo`: HTB
//! classes for the bit rates and, where the kernel has `sch_netem`, netem
//! for the delay), or the relay itself (a paced delay line per direction).
//! The relay forwards raw bytes either way, so TLS passes through untouched.
//! [`Method::None`] makes it a pass-through, for a loopback figure taken the
//! same way as a shaped one.
//!
//! On request ([`Relay::record`]) the relay logs its traffic at the target's
//! side ([`Traffic`]): when each chunk from the target left it and when each
//! chunk to the target reached it, so that a bench can time a message in
//! each direction ([`first_of_last`], [`last_of_first`]) without deriving it
//! from the link's rates.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{Instant, sleep_until};

/// An emulated link between a client and the server it talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// Bit rate from the client to the server.
    pub up_bits_per_s: u64,
    /// Bit rate from the server to the client.
    pub down_bits_per_s: u64,
    /// Round-trip delay; each direction adds half of it.
    pub rtt: Duration,
}

impl Link {
    /// A client on a good office or home fibre line to a cloud region nearby:
    /// 200 Mbit/s up, 1 Gbit/s down, 20 ms round trip.
    pub const DEFAULT: Link = Link {
        up_bits_per_s: 200_000_000,
        down_bits_per_s: 1_000_000_000,
        rtt: Duration::from_millis(20),
    };

    /// The delay each direction adds.
    pub fn one_way(&self) -> Duration {
        self.rtt / 2
    }
}

impl Default for Link {
    fn default() -> Self {
        Link::DEFAULT
    }
}

/// `v` with at most three decimals and no trailing zeros (`1`, `1.5`, `0.25`).
fn short(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A bit rate in the largest decimal unit it reaches (`200 Mbit/s`).
fn rate(bits_per_s: u64) -> String {
    let b = bits_per_s as f64;
    let (v, unit) = match bits_per_s {
        r if r >= 1_000_000_000 => (b / 1e9, "Gbit/s"),
        r if r >= 1_000_000 => (b / 1e6, "Mbit/s"),
        r if r >= 1_000 => (b / 1e3, "kbit/s"),
        _ => (b, "bit/s"),
    };
    format!("{} {unit}", short(v))
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} up, {} down, {} ms RTT",
            rate(self.up_bits_per_s),
            rate(self.down_bits_per_s),
            short(self.rtt.as_secs_f64() * 1e3)
        )
    }
}

/// Who shapes the relay's traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// [`Method::Kernel`] where this process runs as root on Linux and `tc`
    /// answers, else [`Method::Transport`].
    Auto,
    /// The Linux kernel, with `tc` rules on `lo` that match the relay's port:
    /// the traffic really queues in the kernel and TCP reacts to it as it
    /// would on a real bottleneck. Refused if `lo` already has a root qdisc
    /// that is not ours.
    Kernel,
    /// The relay itself: per direction, chunks of at most 16 KiB paced at
    /// the bit rate and each released half a round trip after it arrived.
    /// Works anywhere, unprivileged.
    Transport,
    /// No shaping at all: the relay only forwards (and, when asked, records).
    None,
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Method::Auto => "auto",
            Method::Kernel => "kernel",
            Method::Transport => "transport",
            Method::None => "no",
        })
    }
}

/// A running shaped relay (see [`shaped_relay`]). Dropping it stops it:
/// its tasks are aborted (open connections included) and its kernel rules
/// removed.
#[derive(Debug)]
pub struct Relay {
    addr: SocketAddr,
    method: Method,
    delay_in_kernel: bool,
    log: Log,
    task: JoinHandle<()>,
    /// Held only so that dropping the relay removes its kernel rules.
    _rules: Option<KernelRules>,
}

impl Relay {
    /// Where clients connect instead of the target.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The shaping really in effect: [`Method::Kernel`] or
    /// [`Method::Transport`], never [`Method::Auto`].
    pub fn method(&self) -> Method {
        self.method
    }

    /// Whether the kernel also applies the delay (netem). With
    /// [`Method::Kernel`] on a kernel without `sch_netem` the kernel shapes
    /// the bit rates and the relay adds the delay itself.
    pub fn delay_in_kernel(&self) -> bool {
        self.delay_in_kernel
    }

    /// Starts recording the traffic afresh, dropping what was recorded.
    pub fn record(&self) {
        let mut r = self.log.lock().unwrap();
        r.on = true;
        r.traffic = Traffic::default();
    }

    /// What was recorded since [`Relay::record`]; stops recording.
    pub fn take_traffic(&self) -> Traffic {
        let mut r = self.log.lock().unwrap();
        r.on = false;
        std::mem::take(&mut r.traffic)
    }
}

/// A chunk the relay moved, seen from the target's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// From the target: when the relay read it. To the target: when the
    /// relay's write of it returned.
    pub at: std::time::Instant,
    /// Its size.
    pub bytes: u64,
}

/// A relay's traffic, in time order per direction, all connections together.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Traffic {
    /// Client → target.
    pub to_target: Vec<Chunk>,
    /// Target → client.
    pub from_target: Vec<Chunk>,
}

/// Recording off by default: a long run would otherwise keep an entry per
/// chunk forever.
#[derive(Debug, Default)]
struct Recorder {
    on: bool,
    traffic: Traffic,
}

type Log = Arc<Mutex<Recorder>>;

/// Where one direction of a connection notes its chunks.
#[derive(Debug, Clone)]
struct Tap {
    log: Log,
    /// Target → client: noted on reading (the target sent it); client →
    /// target: noted on writing (it reached the target).
    from_target: bool,
}

impl Tap {
    fn note(&self, bytes: usize) {
        let mut r = self.log.lock().unwrap();
        if r.on {
            // Stamped under the lock so that each list stays in time order
            // even with several connections.
            let c = Chunk {
                at: std::time::Instant::now(),
                bytes: bytes as u64,
            };
            if self.from_target {
                r.traffic.from_target.push(c);
            } else {
                r.traffic.to_target.push(c);
            }
        }
    }
}

/// When a message of `bytes` bytes that was over by `end` began: counting
/// back from the last chunk at or before `end`, the time of the chunk that
/// brings the count to `bytes`. `None` if the chunks hold fewer bytes.
///
/// Meant for payload bytes, which leave the framing around them out (TLS
/// records, HTTP/2 frames: about 0.2 %), and whatever small traffic went the
/// same way between the message and `end` counts as the message's: both
/// shorten the span, by at most about a chunk, i.e. the time the relay took
/// to move one (on a shaped link up to 16 KiB at its rate: 0.66 ms at
/// 200 Mbit/s). Undercounting is the safe side: overcounting could reach
/// into an unrelated message seconds away.
pub fn first_of_last(
    chunks: &[Chunk],
    end: std::time::Instant,
    bytes: u64,
) -> Option<std::time::Instant> {
    let mut seen = 0;
    for c in chunks.iter().rev().filter(|c| c.at <= end) {
        seen += c.bytes;
        if seen >= bytes {
            return Some(c.at);
        }
    }
    None
}

/// When a message of `bytes` bytes that began at or after `start` was over:
/// counting forward from the first chunk at or after `start`, the time of
/// the chunk that brings the count to `bytes`. `None` if the chunks hold
/// fewer bytes. The same caveats as [`first_of_last`].
pub fn last_of_first(
    chunks: &[Chunk],
    start: std::time::Instant,
    bytes: u64,
) -> Option<std::time::Instant> {
    let mut seen = 0;
    for c in chunks.iter().filter(|c| c.at >= start) {
        seen += c.bytes;
        if seen >= bytes {
            return Some(c.at);
        }
    }
    None
}

impl Drop for Relay {
    fn drop(&mut self) {
        // The connection tasks live in a JoinSet owned by this task, so
        // aborting it drops (and so aborts) them too.
        self.task.abort();
    }
}

/// Largest chunk the relay moves at once: small enough that pacing is
/// smooth (16 KiB take 0.66 ms at 200 Mbit/s), big enough to keep the
/// per-chunk overhead low at 1 Gbit/s.
const CHUNK: usize = 16 * 1024;

/// What the relay itself does to one direction.
#[derive(Debug, Clone, Copy)]
struct Shape {
    /// Pacing rate, if the relay paces.
    bits_per_s: Option<u64>,
    /// Delay added to every chunk.
    delay: Duration,
}

impl Shape {
    /// Chunks the delay line may hold: four times the bytes in flight at
    /// full rate over the delay plus 5 ms, counted in full chunks, so that
    /// it never holds the throughput below the bit rate even when reads
    /// return less than a [`CHUNK`].
    fn capacity(&self) -> usize {
        // Unpaced (the kernel shapes the rate): size for a fast local link.
        let bytes_per_s = self.bits_per_s.unwrap_or(10_000_000_000) as f64 / 8.0;
        let in_flight = bytes_per_s * (self.delay.as_secs_f64() + 0.005);
        ((4.0 * in_flight / CHUNK as f64) as usize).clamp(64, 1 << 16)
    }
}

/// Starts a relay on 127.0.0.1 (ephemeral port) that forwards every
/// connection to `target` through `link`: client → target at
/// `link.up_bits_per_s`, target → client at `link.down_bits_per_s`, each
/// direction delayed by `link.rtt / 2` ([`Method::None`]: no shaping, `link`
/// is only checked). Needs a running tokio runtime.
pub async fn shaped_relay(target: SocketAddr, link: Link, method: Method) -> anyhow::Result<Relay> {
    anyhow::ensure!(
        link.up_bits_per_s > 0 && link.down_bits_per_s > 0,
        "a link needs non-zero bit rates: {link:?}"
    );
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let rules = match method {
        Method::Transport | Method::None => None,
        Method::Kernel => Some(KernelRules::install(addr.port(), &link)?),
        // Someone else's qdisc on lo, or a kernel without HTB: shape in
        // the relay rather than fail.
        Method::Auto => match kernel_unavailable() {
            None => KernelRules::install(addr.port(), &link).ok(),
            Some(_) => None,
        },
    };
    let (method, delay_in_kernel) = match &rules {
        Some(r) => (Method::Kernel, r.netem),
        None if method == Method::None => (Method::None, false),
        None => (Method::Transport, false),
    };
    let relay_delay = if delay_in_kernel || method == Method::None {
        Duration::ZERO
    } else {
        link.one_way()
    };
    let pace = |bps: u64| (method == Method::Transport).then_some(bps);
    let up = Shape {
        bits_per_s: pace(link.up_bits_per_s),
        delay: relay_delay,
    };
    let down = Shape {
        bits_per_s: pace(link.down_bits_per_s),
        delay: relay_delay,
    };
    let log = Log::default();
    let task = tokio::spawn(accept_loop(listener, target, up, down, log.clone()));
    Ok(Relay {
        addr,
        method,
        delay_in_kernel,
        log,
        task,
        _rules: rules,
    })
}

async fn accept_loop(listener: TcpListener, target: SocketAddr, up: Shape, down: Shape, log: Log) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    conns.spawn(relay_connection(client, target, up, down, log.clone()));
                }
                // Out of descriptors or the like: back off rather than spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            // Reaps finished connections so the set does not grow forever.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn relay_connection(
    client: TcpStream,
    target: SocketAddr,
    up: Shape,
    down: Shape,
    log: Log,
) -> io::Result<()> {
    let server = TcpStream::connect(target).await?;
    // The relay already chunks and delays; Nagle would only add to it.
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (client_r, client_w) = client.into_split();
    let (server_r, server_w) = server.into_split();
    // An error on either side ends both: the sockets close when the futures drop.
    let up_tap = Tap {
        log: log.clone(),
        from_target: false,
    };
    let down_tap = Tap {
        log,
        from_target: true,
    };
    tokio::try_join!(
        pipe(client_r, server_w, up, up_tap),
        pipe(server_r, client_w, down, down_tap)
    )?;
    Ok(())
}

/// Moves one direction through `shape`, then half-closes the destination,
/// so protocols that rely on a half-close keep working.
async fn pipe(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    shape: Shape,
    tap: Tap,
) -> io::Result<()> {
    if shape.bits_per_s.is_none() && shape.delay.is_zero() {
        // Not `tokio::io::copy`: the tap needs each chunk's time.
        let mut buf = vec![0; CHUNK];
        loop {
            let n = from.read(&mut buf).await?;
            if n == 0 {
                return to.shutdown().await;
            }
            if tap.from_target {
                tap.note(n);
            }
            to.write_all(&buf[..n]).await?;
            if !tap.from_target {
                tap.note(n);
            }
        }
    }
    let writer_tap = tap.clone();
    // A delay line: chunks are stamped on arrival and queued, so a whole
    // window is in flight at once and a stream's throughput is the bit rate,
    // not a chunk per delay.
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(shape.capacity());
    let reader = async move {
        loop {
            let mut buf = vec![0; CHUNK];
            let n = from.read(&mut buf).await?;
            if n == 0 {
                return Ok::<_, io::Error>(());
            }
            buf.truncate(n);
            if tap.from_target {
                tap.note(n);
            }
            if tx.send((Instant::now(), buf)).await.is_err() {
                return Ok(());
            }
        }
    };
    let writer = async move {
        // When the (emulated) bottleneck has finished sending the last
        // chunk: a token bucket no deeper than one chunk.
        let mut link_free = Instant::now();
        while let Some((arrived, buf)) = rx.recv().await {
            let start = link_free.max(arrived);
            link_free = match shape.bits_per_s {
                Some(bps) => start + Duration::from_secs_f64(buf.len() as f64 * 8.0 / bps as f64),
                None => start,
            };
            // Tokio's timer ticks in milliseconds: a chunk due within the
            // current tick would wait for the next one, and back-to-back
            // chunks at 1 Gbit/s (0.13 ms each) would then go one per tick.
            let release = link_free + shape.delay;
            if release > Instant::now() {
                sleep_until(release).await;
            }
            to.write_all(&buf).await?;
            if !writer_tap.from_target {
                writer_tap.note(buf.len());
            }
        }
        to.shutdown().await
    };
    tokio::try_join!(reader, writer)?;
    Ok(())
}

/// The `tc` handle major of our root qdisc on `lo` ("ne", 0x6e65): how a
/// later run recognises rules that a crashed run left behind.
const HANDLE: &str = "6e65";

/// Records which process owns our rules on `lo`, so that a run can tell a
/// crashed run's rules (owner gone: removed) from a live one's (refused).
fn owner_file() -> std::path::PathBuf {
    std::env::temp_dir().join("hecloud-netem-lo.pid")
}

/// Why kernel shaping cannot be used here, or `None` if it can be tried.
fn kernel_unavailable() -> Option<String> {
    if !cfg!(target_os = "linux") {
        return Some("not Linux".into());
    }
    // The effective uid is the second field of `Uid:`.
    let euid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(str::to_string))
        });
    if euid.as_deref() != Some("0") {
        return Some("not running as root".into());
    }
    match Command::new("tc")
        .args(["qdisc", "show", "dev", "lo"])
        .output()
    {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "`tc qdisc show dev lo` failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("cannot run `tc`: {e}")),
    }
}

/// Runs `tc args`, failing with its error output.
fn tc(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("tc")
        .args(args)
        .output()
        .map_err(|e| anyhow::anyhow!("cannot run `tc`: {e}"))?;
    anyhow::ensure!(
        out.status.success(),
        "`tc {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `lo`'s root qdisc line from `tc qdisc show dev lo`.
fn lo_root_qdisc() -> anyhow::Result<String> {
    let shown = tc(&["qdisc", "show", "dev", "lo"])?;
    Ok(shown
        .lines()
        .find(|l| l.contains(" root"))
        .unwrap_or_default()
        .trim()
        .to_string())
}

/// Whether a root qdisc line is lo's default (no queue, handle 0:).
fn is_default_root(line: &str) -> bool {
    line.is_empty() || line.starts_with("qdisc noqueue 0:")
}

/// Whether a root qdisc line is ours.
fn is_ours(line: &str) -> bool {
    line.starts_with(&format!("qdisc htb {HANDLE}:"))
}

/// Removes kernel rules that a crashed run of ours left on `lo` (our
/// handle, owner process gone). Returns whether it removed any; touches
/// nothing that is not ours or whose owner still runs.
pub fn remove_stale_kernel_rules() -> anyhow::Result<bool> {
    if !is_ours(&lo_root_qdisc()?) {
        return Ok(false);
    }
    let owner = std::fs::read_to_string(owner_file())
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    if let Some(pid) = owner {
        anyhow::ensure!(
            pid != std::process::id(),
            "another Kernel relay of this process is shaping lo"
        );
        anyhow::ensure!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} is shaping lo with a Kernel relay"
        );
    }
    tc(&[
        "qdisc",
        "del",
        "dev",
        "lo",
        "root",
        "handle",
        &format!("{HANDLE}:"),
    ])?;
    let _ = std::fs::remove_file(owner_file());
    Ok(true)
}

/// Our `tc` rules on `lo`: removed on drop.
#[derive(Debug)]
struct KernelRules {
    /// Whether netem delays in the kernel (else the relay does).
    netem: bool,
}

impl KernelRules {
    /// An HTB root qdisc on `lo` whose unclassified traffic bypasses it
    /// (`default 0`), one class per direction at its bit rate, selected by
    /// u32 filters on the relay's port, each with a netem leaf for the
    /// one-way delay where the kernel has netem.
    fn install(port: u16, link: &Link) -> anyhow::Result<KernelRules> {
        if let Some(why) = kernel_unavailable() {
            anyhow::bail!("kernel shaping is unavailable: {why}");
        }
        remove_stale_kernel_rules()?;
        let root = lo_root_qdisc()?;
        anyhow::ensure!(
            is_default_root(&root),
            "lo already has a root qdisc ({root}); not touching it"
        );
        // `add` (not `replace`) fails if another run got there first.
        tc(&[
            "qdisc",
            "add",
            "dev",
            "lo",
            "root",
            "handle",
            &format!("{HANDLE}:"),
            "htb",
            "default",
            "0",
        ])?;
        // From here on, any failure drops `rules`, which removes the root.
        let mut rules = KernelRules { netem: true };
        std::fs::write(owner_file(), std::process::id().to_string())?;
        let port = port.to_string();
        let delay = format!("{}us", link.one_way().as_micros());
        for (minor, bps, addr_key, port_key) in [
            (1, link.up_bits_per_s, "dst", "dport"),
            (2, link.down_bits_per_s, "src", "sport"),
        ] {
            let class = format!("{HANDLE}:{minor}");
            let rate = format!("{bps}bit");
            // lo carries packets of up to 64 KiB: a burst below one packet
            // would make HTB's pacing lumpy.
            tc(&[
                "class",
                "add",
                "dev",
                "lo",
                "parent",
                &format!("{HANDLE}:"),
                "classid",
                &class,
                "htb",
                "rate",
                &rate,
                "ceil",
                &rate,
                "burst",
                "64k",
                "cburst",
                "64k",
                "quantum",
                "65536",
            ])?;
            if rules.netem {
                let leaf = format!("{:x}:", 0x6e66 + minor);
                rules.netem = tc(&[
                    "qdisc", "add", "dev", "lo", "parent", &class, "handle", &leaf, "netem",
                    "delay", &delay, "limit", "100000",
                ])
                .is_ok();
            }
            tc(&[
                "filter",
                "add",
                "dev",
                "lo",
                "parent",
                &format!("{HANDLE}:"),
                "protocol",
                "ip",
                "prio",
                "1",
                "u32",
                "match",
                "ip",
                addr_key,
                "127.0.0.1/32",
                "match",
                "ip",
                port_key,
                &port,
                "0xffff",
                "flowid",
                &class,
            ])?;
        }
        // Without netem on both classes, the relay delays both directions.
        if !rules.netem {
            for minor in [1, 2] {
                let _ = tc(&[
                    "qdisc",
                    "del",
                    "dev",
                    "lo",
                    "parent",
                    &format!("{HANDLE}:{minor}"),
                ]);
            }
        }
        Ok(rules)
    }
}

impl Drop for KernelRules {
    fn drop(&mut self) {
        // Deleting the root takes its classes, leaves and filters with it.
        let _ = tc(&[
            "qdisc",
            "del",
            "dev",
            "lo",
            "root",
            "handle",
            &format!("{HANDLE}:"),
        ]);
        if std::fs::read_to_string(owner_file())
            .is_ok_and(|s| s.trim() == std::process::id().to_string())
        {
            let _ = std::fs::remove_file(owner_file());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant as StdInstant;

    use super::*;

    #[test]
    fn link_display() {
        assert_eq!(
            Link::DEFAULT.to_string(),
            "200 Mbit/s up, 1 Gbit/s down, 20 ms RTT"
        );
        let l = Link {
            up_bits_per_s: 1_500_000_000,
            down_bits_per_s: 64_000,
            rtt: Duration::from_micros(500),
        };
        assert_eq!(l.to_string(), "1.5 Gbit/s up, 64 kbit/s down, 0.5 ms RTT");
        assert_eq!(Link::default().one_way(), Duration::from_millis(10));
    }

    #[test]
    fn recognises_qdiscs() {
        assert!(is_default_root("qdisc noqueue 0: root refcnt 2"));
        assert!(is_default_root(""));
        assert!(!is_default_root(
            "qdisc htb 1: root refcnt 2 r2q 10 default 0"
        ));
        assert!(is_ours("qdisc htb 6e65: root refcnt 2 r2q 10 default 0"));
        assert!(!is_ours("qdisc htb 1: root refcnt 2 r2q 10 default 0"));
    }

    /// A test server: after a 9-byte request (op, length as u64 LE) it
    /// echoes (`e`) or swallows (`u`, then answers one byte) `length` bytes,
    /// or sends (`d`) `length` bytes.
    async fn server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut head = [0u8; 9];
                    s.read_exact(&mut head).await?;
                    let len = u64::from_le_bytes(head[1..].try_into().unwrap()) as usize;
                    match head[0] {
                        b'e' => {
                            let mut buf = vec![0; len];
                            s.read_exact(&mut buf).await?;
                            s.write_all(&buf).await?;
                        }
                        b'u' => {
                            let mut buf = vec![0; len];
                            s.read_exact(&mut buf).await?;
                            s.write_all(&[1]).await?;
                        }
                        _ => s.write_all(&vec![7; len]).await?,
                    }
                    s.flush().await
                });
            }
        });
        addr
    }

    fn request(op: u8, len: usize) -> Vec<u8> {
        let mut r = vec![op];
        r.extend((len as u64).to_le_bytes());
        r
    }

    /// Seconds for a 100-byte echo through `relay`.
    async fn echo_secs(relay: SocketAddr) -> f64 {
        let mut s = TcpStream::connect(relay).await.unwrap();
        s.set_nodelay(true).unwrap();
        let t = StdInstant::now();
        let mut msg = request(b'e', 100);
        msg.extend([5u8; 100]);
        s.write_all(&msg).await.unwrap();
        let mut back = [0u8; 100];
        s.read_exact(&mut back).await.unwrap();
        assert_eq!(back, [5u8; 100]);
        t.elapsed().as_secs_f64()
    }

    /// Seconds to send `len` bytes up through `relay` until the server's answer.
    async fn up_secs(relay: SocketAddr, len: usize) -> f64 {
        let mut s = TcpStream::connect(relay).await.unwrap();
        let t = StdInstant::now();
        s.write_all(&request(b'u', len)).await.unwrap();
        s.write_all(&vec![3; len]).await.unwrap();
        let mut ack = [0u8];
        s.read_exact(&mut ack).await.unwrap();
        t.elapsed().as_secs_f64()
    }

    /// Seconds to receive `len` bytes down through `relay`.
    async fn down_secs(relay: SocketAddr, len: usize) -> f64 {
        let mut s = TcpStream::connect(relay).await.unwrap();
        let t = StdInstant::now();
        s.write_all(&request(b'd', len)).await.unwrap();
        let mut buf = vec![0; len];
        s.read_exact(&mut buf).await.unwrap();
        t.elapsed().as_secs_f64()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn transport_shapes_latency_and_throughput() {
        let target = server().await;
        let link = Link::DEFAULT;
        let relay = shaped_relay(target, link, Method::Transport).await.unwrap();
        assert_eq!(relay.method(), Method::Transport);
        assert!(!relay.delay_in_kernel());
        let rtt = link.rtt.as_secs_f64();

        // Best of three: the floor is exact, the ceiling only needs one
        // run that the loaded machine did not stall.
        let mut echo = f64::MAX;
        for _ in 0..3 {
            echo = echo.min(echo_secs(relay.addr()).await);
        }
        assert!(
            echo >= rtt,
            "echo in {echo} s, under the {rtt} s round trip"
        );
        // The ceilings are loose: a loaded CI machine may stall the relay;
        // what the shaping must never do is beat the link.
        assert!(echo < rtt + 0.2, "echo in {echo} s");

        let len = 8_000_000;
        let want_up = len as f64 * 8.0 / link.up_bits_per_s as f64 + rtt;
        let up = up_secs(relay.addr(), len).await;
        assert!(
            up > 0.9 * want_up && up < 3.0 * want_up,
            "8 MB up in {up} s, expected {want_up} s"
        );
        let down = down_secs(relay.addr(), len).await;
        let want_down = len as f64 * 8.0 / link.down_bits_per_s as f64 + rtt;
        assert!(
            down > 0.9 * want_down && down < up,
            "8 MB down in {down} s (expected {want_down} s), up in {up} s"
        );
        println!(
            "transport: echo {echo:.4} s, 8 MB up {up:.3} s (expected {want_up:.3}), down {down:.3} s"
        );
    }

    fn chunks(t0: std::time::Instant, list: &[(u64, u64)]) -> Vec<Chunk> {
        list.iter()
            .map(|&(ms, bytes)| Chunk {
                at: t0 + Duration::from_millis(ms),
                bytes,
            })
            .collect()
    }

    #[test]
    fn message_start_counts_back_from_its_end() {
        let t0 = std::time::Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        // A 10-byte poll at 0 ms, a 300-byte message at 5..7 ms, a later
        // 50-byte one at 20 ms.
        let c = chunks(t0, &[(0, 10), (5, 100), (6, 100), (7, 100), (20, 50)]);
        assert_eq!(first_of_last(&c, at(10), 300), Some(at(5)));
        // The chunk that completes the count is the answer, even if it
        // holds more than what is left to count.
        assert_eq!(first_of_last(&c, at(10), 250), Some(at(5)));
        assert_eq!(first_of_last(&c, at(7), 100), Some(at(7)));
        // Chunks after `end` do not count.
        assert_eq!(first_of_last(&c, at(6), 150), Some(at(5)));
        assert_eq!(first_of_last(&c, at(10), 311), None);
        assert_eq!(first_of_last(&[], at(10), 1), None);
    }

    #[test]
    fn message_end_counts_forward_from_its_start() {
        let t0 = std::time::Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let c = chunks(t0, &[(0, 10), (5, 100), (6, 100), (7, 100), (20, 50)]);
        assert_eq!(last_of_first(&c, at(1), 300), Some(at(7)));
        assert_eq!(last_of_first(&c, at(5), 101), Some(at(6)));
        // Chunks before `start` do not count.
        assert_eq!(last_of_first(&c, at(6), 250), Some(at(20)));
        assert_eq!(last_of_first(&c, at(6), 251), None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pass_through_records_both_directions() {
        let target = server().await;
        let relay = shaped_relay(target, Link::DEFAULT, Method::None)
            .await
            .unwrap();
        assert_eq!(relay.method(), Method::None);
        // Not recording yet: nothing is kept.
        echo_secs(relay.addr()).await;
        assert_eq!(relay.take_traffic(), Traffic::default());
        relay.record();
        let t = std::time::Instant::now();
        echo_secs(relay.addr()).await;
        let traffic = relay.take_traffic();
        let sum = |c: &[Chunk]| c.iter().map(|c| c.bytes).sum::<u64>();
        assert_eq!(sum(&traffic.to_target), 109);
        assert_eq!(sum(&traffic.from_target), 100);
        let request_in = last_of_first(&traffic.to_target, t, 109).unwrap();
        let reply_out =
            first_of_last(&traffic.from_target, std::time::Instant::now(), 100).unwrap();
        assert!(request_in <= reply_out);
        // Stopped by the take.
        echo_secs(relay.addr()).await;
        assert_eq!(relay.take_traffic(), Traffic::default());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn relay_stops_on_drop() {
        let target = server().await;
        let relay = shaped_relay(target, Link::DEFAULT, Method::Transport)
            .await
            .unwrap();
        let addr = relay.addr();
        let mut open = TcpStream::connect(addr).await.unwrap();
        open.write_all(&request(b'd', 1 << 30)).await.unwrap();
        let mut some = [0u8; 1000];
        open.read_exact(&mut some).await.unwrap();
        drop(relay);
        // The open connection is cut and no new one is accepted.
        let mut rest = Vec::new();
        let cut = tokio::time::timeout(Duration::from_secs(5), open.read_to_end(&mut rest)).await;
        assert!(cut.is_ok(), "the relayed connection outlived the relay");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(TcpStream::connect(addr).await.is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "changes the loopback device's qdisc while it runs: run by hand as root"]
    async fn kernel_shapes_and_cleans_up() {
        if let Some(why) = kernel_unavailable() {
            eprintln!("kernel shaping test skipped: {why}");
            return;
        }
        let before = tc(&["qdisc", "show", "dev", "lo"]).unwrap();
        let root = lo_root_qdisc().unwrap();
        if !is_default_root(&root) {
            eprintln!("kernel shaping test skipped: lo is busy ({root})");
            return;
        }
        let target = server().await;
        // Small rates keep the test short and well inside what a loaded
        // machine forwards.
        let link = Link {
            up_bits_per_s: 40_000_000,
            down_bits_per_s: 160_000_000,
            rtt: Duration::from_millis(20),
        };
        let relay = match shaped_relay(target, link, Method::Kernel).await {
            Ok(r) => r,
            // Another test run (another worktree) may hold lo right now.
            Err(e)
                if e.to_string().contains("shaping lo")
                    || e.to_string().contains("File exists") =>
            {
                eprintln!("kernel shaping test skipped: {e}");
                return;
            }
            Err(e) => panic!("{e:#}"),
        };
        assert_eq!(relay.method(), Method::Kernel);
        // A second Kernel relay must not take over lo; Auto falls back.
        assert!(shaped_relay(target, link, Method::Kernel).await.is_err());
        let auto = shaped_relay(target, link, Method::Auto).await.unwrap();
        assert_eq!(auto.method(), Method::Transport);
        drop(auto);
        assert!(is_ours(&lo_root_qdisc().unwrap()));

        let rtt = link.rtt.as_secs_f64();
        let mut echo = f64::MAX;
        for _ in 0..3 {
            echo = echo.min(echo_secs(relay.addr()).await);
        }
        assert!(echo >= rtt * 0.95, "echo in {echo} s");
        assert!(echo < rtt + 0.04, "echo in {echo} s");
        let len = 2_000_000;
        let want_up = len as f64 * 8.0 / link.up_bits_per_s as f64 + rtt;
        let up = up_secs(relay.addr(), len).await;
        assert!(
            up > 0.7 * want_up && up < 1.5 * want_up,
            "2 MB up in {up} s, expected {want_up} s"
        );
        let down = down_secs(relay.addr(), len).await;
        assert!(down * 2.0 <= up, "2 MB down in {down} s, up in {up} s");
        println!(
            "kernel (netem delay: {}): echo {echo:.4} s, 2 MB up {up:.3} s (expected {want_up:.3}), down {down:.3} s",
            relay.delay_in_kernel()
        );
        drop(relay);
        assert_eq!(tc(&["qdisc", "show", "dev", "lo"]).unwrap(), before);
        assert!(!owner_file().exists());
    }
}
