//! The real binaries: `hecloud serve`, `hecloud proxy` in front of it with a
//! key folder imported, and `hecloud run --via-proxy` adding fresh random
//! vectors, checked against their plaintext sum; the unattested proxy is
//! refused without `--allow-unattested`; no token reaches a log. A BGV key
//! folder through the same path: `--ints` inputs added and multiplied mod
//! t, a value not below t refused.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const SERVER_TOKEN: &str = "cli-proxy-server-token-0123";
const PROXY_TOKEN: &str = "cli-proxy-client-token-0123";

fn hecloud() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hecloud"));
    for v in [
        "HECLOUD_SERVER",
        "HECLOUD_TOKEN",
        "HECLOUD_CA",
        "HECLOUD_PROXY",
        "HECLOUD_PROXY_TOKEN",
        "HECLOUD_PROXY_CA",
    ] {
        c.env_remove(v);
    }
    c
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills the child when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns `cmd` and waits for a stderr line containing `ready`; every line
/// is checked for the tokens.
fn spawn_until(mut cmd: Command, ready: &'static str) -> Running {
    let mut child = cmd
        .env("HECLOUD_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn hecloud");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            assert!(
                !line.contains(SERVER_TOKEN) && !line.contains(PROXY_TOKEN),
                "token in log: {line}"
            );
            if line.contains(ready) {
                let _ = tx.send(());
            }
        }
    });
    let running = Running(child);
    rx.recv_timeout(Duration::from_secs(120))
        .unwrap_or_else(|_| panic!("no {ready:?} line"));
    running
}

/// Fresh random reals in [-10, 10).
fn random_values(n: usize) -> Vec<f64> {
    let mut rng = hecloud_math::testing::rng();
    (0..n)
        .map(|_| {
            let x = rand_core::RngCore::next_u64(&mut rng);
            (x >> 11) as f64 / (1u64 << 53) as f64 * 20.0 - 10.0
        })
        .collect()
}

fn write_values(path: &Path, v: &[f64]) {
    let text: Vec<String> = v.iter().map(|x| format!("{x}")).collect();
    std::fs::write(path, text.join(" ")).unwrap();
}

/// `hecloud serve` and `hecloud proxy` in front of it, under `d`, with a
/// key folder of `preset` made by `hecloud keygen` and imported for
/// tenant alice: (server, proxy, the proxy's URL).
fn serve_with_proxy(d: &Path, preset: &str) -> (Running, Running, String) {
    let (server_port, proxy_port) = (free_port(), free_port());
    let mut serve = hecloud();
    serve.args([
        "serve",
        "--data-dir",
        d.join("server").to_str().unwrap(),
        "--listen",
        &format!("127.0.0.1:{server_port}"),
        "--workers",
        "1",
        "--tenant",
        &format!("alice:{SERVER_TOKEN}"),
    ]);
    let server = spawn_until(serve, "hecloud serving on ");

    let keys = d.join("keys");
    let out = hecloud()
        .args([
            "keygen",
            "--dir",
            keys.to_str().unwrap(),
            "--preset",
            preset,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let proxy_dir = d.join("proxy");
    std::fs::create_dir_all(&proxy_dir).unwrap();
    std::fs::write(
        proxy_dir.join("tenants"),
        format!("# tenant proxy-token server-token\nalice {PROXY_TOKEN} {SERVER_TOKEN}\n"),
    )
    .unwrap();
    let mut proxy = hecloud();
    proxy.args([
        "proxy",
        "--server",
        &format!("https://localhost:{server_port}"),
        "--server-ca",
        d.join("server/tls/ca.pem").to_str().unwrap(),
        "--listen",
        &format!("127.0.0.1:{proxy_port}"),
        "--dir",
        proxy_dir.to_str().unwrap(),
        "--import-keys",
        &format!("alice={}", keys.display()),
    ]);
    let proxy = spawn_until(proxy, "hecloud proxy on ");
    (server, proxy, format!("https://localhost:{proxy_port}"))
}

#[test]
fn run_via_proxy_adds_plaintext_inputs_and_an_unattested_proxy_needs_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_server, _proxy, url) = serve_with_proxy(d, "n13");
    let proxy_dir = d.join("proxy");

    let n = 5;
    let (x, y) = (random_values(n), random_values(n));
    write_values(&d.join("x.txt"), &x);
    write_values(&d.join("y.txt"), &y);
    let ca = proxy_dir.join("tls/ca.pem");
    let run = |token: &str, extra: &[&str]| {
        let mut c = hecloud();
        c.args([
            "run",
            "--via-proxy",
            &url,
            "--proxy-ca",
            ca.to_str().unwrap(),
            "--token",
            token,
            "--op",
            "add",
            "--count",
            &n.to_string(),
            d.join("x.txt").to_str().unwrap(),
            d.join("y.txt").to_str().unwrap(),
        ]);
        c.args(extra);
        c.output().unwrap()
    };

    // Refused before anything is sent: the proxy has no TEE.
    let out = run(PROXY_TOKEN, &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unattested") && err.contains("--allow-unattested"),
        "{err}"
    );

    let out = run(PROXY_TOKEN, &["--allow-unattested"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("unattested"), "no warning: {err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("add ("))
        .unwrap_or_else(|| panic!("no result line in {stdout:?}"));
    let got: Vec<f64> = line
        .split("): ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(got.len(), n, "{line}");
    for i in 0..n {
        let want = x[i] + y[i];
        assert!(
            (got[i] - want).abs() < 1e-3,
            "slot {i}: {} vs {want}",
            got[i]
        );
    }

    // A wrong token: a clear refusal.
    let out = run("not-the-proxy-token-0123", &["--allow-unattested"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown or wrong proxy token"), "{err}");
}

/// The integers of `hecloud run`'s result line for output `name`.
fn result_ints(stdout: &str, name: &str) -> Vec<u64> {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(&format!("{name} (")))
        .unwrap_or_else(|| panic!("no {name} line in {stdout:?}"));
    line.split("): ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect()
}

#[test]
fn run_via_proxy_takes_integers_for_a_bgv_key_folder() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_server, _proxy, url) = serve_with_proxy(d, "bgv-n13");
    let ca = d.join("proxy/tls/ca.pem");
    const T: u64 = 65537;
    let n = 6;
    let mut rng = hecloud_math::testing::rng();
    let mut random = || -> Vec<u64> {
        let mut v: Vec<u64> = (0..n)
            .map(|_| rand_core::RngCore::next_u64(&mut rng) % T)
            .collect();
        v[0] = T - 1;
        v
    };
    let (x, y) = (random(), random());
    let write = |name: &str, v: &[u64]| {
        let text: Vec<String> = v.iter().map(u64::to_string).collect();
        std::fs::write(d.join(name), text.join(", ")).unwrap();
    };
    write("x.txt", &x);
    write("y.txt", &y);
    write("big.txt", &[1, T]);
    let run = |op: &str, files: &[&str]| {
        let mut c = hecloud();
        c.args([
            "run",
            "--via-proxy",
            &url,
            "--proxy-ca",
            ca.to_str().unwrap(),
            "--token",
            PROXY_TOKEN,
            "--allow-unattested",
            "--ints",
            "--op",
            op,
            "--count",
            &n.to_string(),
        ]);
        c.args(files.iter().map(|f| d.join(f)));
        c.output().unwrap()
    };
    let m = |v: u128| (v % T as u128) as u64;
    for (op, want) in [
        (
            "add",
            (0..n)
                .map(|i| m(x[i] as u128 + y[i] as u128))
                .collect::<Vec<_>>(),
        ),
        (
            "mul",
            (0..n).map(|i| m(x[i] as u128 * y[i] as u128)).collect(),
        ),
    ] {
        let out = run(op, &["x.txt", "y.txt"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{op}: {err}");
        assert_eq!(
            result_ints(&String::from_utf8_lossy(&out.stdout), op),
            want,
            "{op} mod t"
        );
    }
    // A value not below t: refused, not wrapped; the proxy stays up.
    let out = run("add", &["big.txt", "x.txt"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid-request") && err.contains("plaintext modulus"),
        "{err}"
    );
    let out = run("add", &["x.txt"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(result_ints(&String::from_utf8_lossy(&out.stdout), "add"), x);
}

/// `--enclave cvm` outside a confidential VM stops at once with the
/// reason, before it makes a sealing key or serves anything.
#[test]
fn an_enclave_in_a_confidential_vm_is_refused_outside_one() {
    if Path::new("/sys/kernel/config/tsm/report").exists() {
        eprintln!("this machine offers configfs-tsm: nothing to check");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let out = hecloud()
        .args([
            "proxy",
            "--enclave",
            "cvm",
            "--dir",
            d.path().to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("configfs-tsm is not there"), "{err}");
    assert!(!d.path().join("sealing.key").exists());
}
