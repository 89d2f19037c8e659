//! The real `hecloud serve` binary killed with SIGKILL in the middle of a job
//! and in the middle of an upload, then restarted on the same store: every
//! acknowledged object comes back byte-identical, the partial upload resumes,
//! and the interrupted job is run again to success.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hecloud_client::Client;
use hecloud_protocol::rpc::{self, JobState, UploadHeader};

const TOKEN: &str = "crash-test-token-0123456789";

struct Server {
    child: Child,
    url: String,
}

fn serve(dir: &std::path::Path, port: u16, workers: usize) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hecloud"));
    c.args([
        "serve",
        "--data-dir",
        dir.to_str().unwrap(),
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--workers",
        &workers.to_string(),
        "--tenant",
        &format!("crash:{TOKEN}"),
    ]);
    c
}

fn start(dir: &std::path::Path, port: u16) -> Server {
    start_with(dir, port, 1)
}

/// `hecloud serve` that cannot start: its exit status and what it printed.
fn refused(dir: &std::path::Path, port: u16) -> String {
    let out = serve(dir, port, 1)
        .stdout(Stdio::null())
        .output()
        .expect("run hecloud serve");
    assert!(!out.status.success(), "it started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn start_with(dir: &std::path::Path, port: u16, workers: usize) -> Server {
    let mut child = serve(dir, port, workers)
        .env("HECLOUD_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start hecloud serve");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !sent && line.contains("hecloud serving on ") {
                let url = line.rsplit(' ').next().unwrap().to_string();
                let _ = tx.send(url);
                sent = true;
            }
            // Logs must never carry the token.
            assert!(!line.contains(TOKEN), "token in log: {line}");
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("server did not start");
    Server { child, url }
}

fn kill9(mut s: Server) {
    // SIGKILL: no shutdown path runs.
    s.child.kill().unwrap();
    s.child.wait().unwrap();
}

async fn connect(s: &Server, dir: &std::path::Path) -> Client {
    let ca = std::fs::read_to_string(dir.join("tls/ca.pem")).unwrap();
    let port = s.url.rsplit(':').next().unwrap();
    Client::connect(&format!("https://localhost:{port}"), TOKEN, Some(&ca))
        .await
        .unwrap()
        .with_chunk_size(256 << 10)
}

/// A key holder that answers echo callbacks only once `killed` is raised
/// (or after a minute): it holds a job mid-way until the server is killed.
async fn holding_key_holder(
    c: &Client,
    killed: Arc<std::sync::atomic::AtomicBool>,
) -> hecloud_client::SessionHandle {
    c.open_session(
        &[rpc::CALLBACK_ECHO],
        Arc::new(move |_, p: &[u8]| {
            let t = Instant::now();
            while !killed.load(std::sync::atomic::Ordering::Relaxed)
                && t.elapsed() < Duration::from_secs(60)
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(p.to_vec())
        }),
    )
    .await
    .unwrap()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `n` bytes from the test's replayable random stream
/// (`hecloud_math::testing`: the seed is printed, `HECLOUD_TEST_SEED`
/// replays it).
fn random_bytes(n: usize) -> Vec<u8> {
    use rand_core::RngCore;
    let mut v = vec![0u8; n];
    hecloud_math::testing::rng().fill_bytes(&mut v);
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_mid_job_and_mid_upload_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let s = start(dir.path(), port);
    let c = connect(&s, dir.path()).await;

    // Acknowledged objects of several sizes (random bytes: opaque, as the
    // server checks the bytes of every other kind).
    let mut acked = vec![];
    for n in [1usize, 1000, 300_000, 3_000_000] {
        let data = random_bytes(n);
        let o = c
            .upload(rpc::OPAQUE_KIND, Arc::new(data.clone()))
            .await
            .unwrap();
        acked.push((o.object_id, data));
    }
    // A partial upload (never acknowledged).
    let partial = Arc::new(random_bytes(2_000_000));
    let h = UploadHeader {
        upload_id: "crash-partial-upload-01".into(),
        kind: rpc::OPAQUE_KIND.into(),
        total_bytes: partial.len() as u64,
        blake3: blake3::hash(&partial).as_bytes().to_vec(),
    };
    let _ = c
        .upload(&h.kind, partial.clone())
        .header(h.clone())
        .stop_after(1_000_000)
        .await;
    // A job that is mid-way (its key holder has not answered yet).
    let killed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let slow = holding_key_holder(&c, killed.clone()).await;
    let job = c
        .submit(rpc::JOB_KIND_ECHO, b"survive".to_vec(), "")
        .await
        .unwrap();
    let t = Instant::now();
    loop {
        let j = c.job(&job.job_id).await.unwrap();
        if j.state == JobState::Running as i32 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "job never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    kill9(s);
    killed.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(slow);
    drop(c);

    // Restart on the same store.
    let s = start(dir.path(), port);
    let c = connect(&s, dir.path()).await;
    // A key holder that answers at once: the interrupted job runs again.
    let _fast = c
        .open_session(
            &[rpc::CALLBACK_ECHO],
            Arc::new(|_, p: &[u8]| Ok(p.to_vec())),
        )
        .await
        .unwrap();
    for (id, data) in &acked {
        let back = c.download(id, None).await.unwrap();
        assert!(back == *data, "object {id} changed across SIGKILL");
    }
    let listed = c.list().await.unwrap();
    for (id, _) in &acked {
        assert!(listed.iter().any(|o| &o.object_id == id));
    }
    // The partial upload resumes from what the server kept.
    let have = c.upload_offset("crash-partial-upload-01").await.unwrap();
    assert!(have <= 1_000_000, "server claims {have} bytes");
    let o = c
        .upload(&h.kind, partial.clone())
        .header(h.clone())
        .from_offset(have)
        .await
        .unwrap();
    assert_eq!(c.download(&o.object_id, None).await.unwrap(), *partial);
    // The job interrupted by the kill is resumed and succeeds.
    let done = c.wait(&job.job_id, &|_| {}).await.unwrap();
    assert_eq!(done.state, JobState::Succeeded as i32, "{}", done.error);
    let out = c.download(&done.outputs[0].object_id, None).await.unwrap();
    assert_eq!(out, b"survive");
    kill9(s);
}

/// Cancels and restarts: a cancel answered before a SIGKILL holds after
/// it, a second server on the same data dir is refused, and a restart that
/// cannot bind its port resumes nothing (it used up an attempt of every
/// interrupted job, and the next restart failed them).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_survives_sigkill_and_a_restart_that_cannot_listen_costs_no_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let s = start_with(dir.path(), port, 2);
    // Refused while it runs, with the reason.
    let e = refused(dir.path(), free_port());
    assert!(e.contains("in use by another hecloud server"), "{e}");
    let c = connect(&s, dir.path()).await;
    let killed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let held = holding_key_holder(&c, killed.clone()).await;
    let keep = c
        .submit(rpc::JOB_KIND_ECHO, b"keep".to_vec(), "")
        .await
        .unwrap();
    let drop_it = c
        .submit(rpc::JOB_KIND_ECHO, b"drop".to_vec(), "")
        .await
        .unwrap();
    // Both wait on the key holder: running, and past the progress report
    // that would otherwise overwrite the "cancelling" note below.
    let t = Instant::now();
    for id in [&keep.job_id, &drop_it.job_id] {
        loop {
            let j = c.job(id).await.unwrap();
            if j.state == JobState::Running as i32 && j.message == "calling the key holder" {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(30), "job never started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let answer = c.cancel(&drop_it.job_id).await.unwrap();
    assert_eq!(answer.message, "cancelling");
    kill9(s);
    killed.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(held);
    drop(c);

    // Twice with the port taken: each would have cost `keep` an attempt
    // (two of two), and it would have failed at the next start.
    let taken = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    for _ in 0..2 {
        let e = refused(dir.path(), port);
        assert!(!e.contains("resuming job"), "{e}");
    }
    drop(taken);
    let s = start_with(dir.path(), port, 2);
    let c = connect(&s, dir.path()).await;
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let _fast = c
        .open_session(
            &[rpc::CALLBACK_ECHO],
            Arc::new(move |_, p: &[u8]| {
                log.lock().unwrap().push(p.to_vec());
                Ok(p.to_vec())
            }),
        )
        .await
        .unwrap();
    let kept = c.wait(&keep.job_id, &|_| {}).await.unwrap();
    assert_eq!(kept.state, JobState::Succeeded as i32, "{}", kept.error);
    let dropped = c.job(&drop_it.job_id).await.unwrap();
    assert_eq!(dropped.state, JobState::Cancelled as i32, "{dropped:?}");
    assert!(dropped.outputs.is_empty());
    assert_eq!(
        *seen.lock().unwrap(),
        [b"keep".to_vec()],
        "the cancelled job ran again"
    );
    kill9(s);
}
