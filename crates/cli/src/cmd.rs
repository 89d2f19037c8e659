//! The service commands: `serve`, `keygen`, `encrypt`, `upload`, `submit`,
//! `status`, `download`, `decrypt`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use hecloud_bench::report::bytes;
use hecloud_bench::workload;
use hecloud_client::keys::{self, KeyDir};
use hecloud_client::{Client, ProgressFn};
use hecloud_protocol::rpc::{self, JobState};
use hecloud_protocol::{Message, ObjectId};
use indicatif::{ProgressBar, ProgressStyle};

/// How to reach the server (flags or `HECLOUD_SERVER`, `HECLOUD_TOKEN`, `HECLOUD_CA`).
#[derive(Debug, Args)]
pub struct Conn {
    /// Server URL: `https://host:port`; plain `http://` only to a loopback
    /// host (127.0.0.1, `[::1]`, localhost), as the token would cross the
    /// network in cleartext.
    #[arg(long, env = "HECLOUD_SERVER", default_value = "https://localhost:7443")]
    server: String,
    /// Bearer token of your tenant.
    #[arg(long, env = "HECLOUD_TOKEN", hide_env_values = true)]
    token: String,
    /// CA certificate to trust (PEM); `hecloud serve` writes `<data-dir>/tls/ca.pem`.
    #[arg(long, env = "HECLOUD_CA", default_value = "hecloud-data/tls/ca.pem")]
    ca: PathBuf,
}

/// The CA certificate at `path` (`what` names it in errors) when `url` is
/// `https://` (the scheme is case-insensitive: `HTTPS://` needs it too),
/// `None` otherwise.
pub fn ca_for(url: &str, path: &Path, what: &str) -> anyhow::Result<Option<String>> {
    let https = url
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"));
    if !https {
        return Ok(None);
    }
    std::fs::read_to_string(path)
        .with_context(|| format!("reading {what} {}", path.display()))
        .map(Some)
}

impl Conn {
    /// Connects.
    pub async fn connect(&self) -> anyhow::Result<Client> {
        let ca = ca_for(&self.server, &self.ca, "the CA certificate")?;
        Client::connect(&self.server, &self.token, ca.as_deref())
            .await
            .with_context(|| format!("connecting to {}", self.server))
    }
}

/// `hecloud serve` options.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TOML configuration file (flags and `HECLOUD_*` variables override it).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// Store folder.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Job workers.
    #[arg(long)]
    workers: Option<usize>,
    /// Serve plain HTTP/2 (no TLS): for tests; refused unless the listen
    /// address is loopback (tokens would cross the network in clear).
    #[arg(long)]
    no_tls: bool,
    /// Adds a tenant `name:token` (repeatable).
    #[arg(long)]
    tenant: Vec<String>,
    /// Accept insecure (test) CKKS parameter literals.
    #[arg(long)]
    allow_insecure_params: bool,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Logs of the long-running commands (`serve`, `proxy`) to stderr, at the
/// level `HECLOUD_LOG` names (default `info`).
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HECLOUD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_target(false)
        .init();
}

/// `hecloud serve`.
pub fn serve(a: ServeArgs) -> anyhow::Result<()> {
    init_logging();
    let mut config = match &a.config {
        Some(p) => hecloud_server::ServerConfig::from_file(p)?,
        None => hecloud_server::ServerConfig::default(),
    };
    config.apply_env(|k| std::env::var(k).ok())?;
    if let Some(l) = a.listen {
        config.listen = l;
    }
    if let Some(d) = a.data_dir {
        config.data_dir = d;
    }
    if let Some(w) = a.workers {
        config.workers = w;
    }
    if a.no_tls {
        config.tls = false;
    }
    if a.allow_insecure_params {
        config.allow_insecure_params = true;
    }
    for t in &a.tenant {
        let (name, token) = t.split_once(':').context("--tenant takes name:token")?;
        config.tenants.push(hecloud_server::TenantConfig {
            name: name.into(),
            token: Some(token.into()),
            token_blake3: None,
        });
    }
    if config.tenants.is_empty() {
        // First start without tenants: one `default` tenant whose token is
        // kept (0600) in the store folder.
        hecloud_server::store::create_private_dir(&config.data_dir)?;
        let path = config.data_dir.join("default.token");
        let token = match std::fs::read_to_string(&path) {
            Ok(t) => t.trim().to_string(),
            Err(_) => {
                let t = hecloud_bench::embedded::random_token();
                hecloud_protocol::fs::write_private(&path, t.as_bytes())?;
                t
            }
        };
        eprintln!(
            "no tenants configured: tenant `default`, token in {} (export HECLOUD_TOKEN=$(cat {}))",
            path.display(),
            path.display()
        );
        config.tenants.push(hecloud_server::TenantConfig {
            name: "default".into(),
            token: Some(token),
            token_blake3: None,
        });
    }
    // Before the runtime's threads exist (see `retain_freed_memory`).
    if config.retain_freed_memory {
        hecloud_server::alloc::retain_freed_memory();
    }
    runtime()?.block_on(async move {
        let server = hecloud_server::start(config).await?;
        eprintln!("hecloud serving on {}", server.url());
        tokio::select! {
            r = tokio::signal::ctrl_c() => { r?; eprintln!("stopping"); server.stop().await?; }
        }
        Ok(())
    })
}

/// `hecloud keygen`.
pub fn keygen(
    dir: &Path,
    preset: &str,
    sum_slots: Option<usize>,
    bits_in_slots: bool,
    rotations: &[i64],
    refresh: &keys::RefreshOptions,
    boot: &keys::BootOptions,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        !bits_in_slots || preset.starts_with("bgv-"),
        "--bits-in-slots is for BGV presets (bgv-n13 … bgv-n16)"
    );
    anyhow::ensure!(
        preset != keys::TFHE_PRESET || *refresh == keys::RefreshOptions::default(),
        "TFHE keys have no refresh: --lambda-s and --circuit-private are for CKKS and BGV"
    );
    anyhow::ensure!(
        refresh.lambda_s.is_none() || !preset.starts_with("bgv-"),
        "--lambda-s is for CKKS: the BGV mask hides perfectly"
    );
    anyhow::ensure!(
        *boot == keys::BootOptions::default() || preset.starts_with("boot-"),
        "--prefer-bootstrap and --boot-slots are for bootstrappable presets (boot-n16, boot-test-n12)"
    );
    if preset == keys::TFHE_PRESET {
        let r = keys::tfhe_keygen(dir)?;
        return report_keygen(dir, &r);
    }
    if preset.starts_with("boot-") {
        let preset = keys::parse_boot_preset(preset)?;
        anyhow::ensure!(
            sum_slots.is_none(),
            "a bootstrappable folder takes --rotations, not --sum-slots"
        );
        let spinner = ProgressBar::new_spinner().with_message(format!(
            "generating {} keys with the bootstrapping circuit's rotations (gigabytes at N = 2^16)",
            preset.name()
        ));
        spinner.enable_steady_tick(Duration::from_millis(100));
        let r = keys::boot_keygen(dir, preset, rotations, refresh, boot)?;
        spinner.finish_and_clear();
        return report_keygen(dir, &r);
    }
    if preset.starts_with("bgv-") {
        let preset = keys::parse_bgv_preset(preset)?;
        anyhow::ensure!(
            rotations.is_empty(),
            "BGV keys take no --rotations (--sum-slots adds the slot-sum keys)"
        );
        let slot_sums = sum_slots.is_some_and(|n| n > 1);
        let spinner = ProgressBar::new_spinner().with_message(format!(
            "generating {} keys{}{}",
            preset.name(),
            if slot_sums { " with slot-sum keys" } else { "" },
            if bits_in_slots {
                " with bits-in-slots keys"
            } else {
                ""
            }
        ));
        spinner.enable_steady_tick(Duration::from_millis(100));
        let r = keys::bgv_keygen_with(dir, preset, slot_sums, bits_in_slots, refresh)?;
        spinner.finish_and_clear();
        return report_keygen(dir, &r);
    }
    let sum_slots = sum_slots.unwrap_or(1024);
    let preset = keys::parse_preset(preset)?;
    let mut rots = rotations.to_vec();
    if sum_slots > 1 {
        anyhow::ensure!(
            sum_slots.is_power_of_two(),
            "--sum-slots must be a power of two"
        );
        rots.extend(workload::sum_rotations(sum_slots));
    }
    rots.sort();
    rots.dedup();
    let spinner = ProgressBar::new_spinner().with_message(format!(
        "generating {} keys with {} rotations",
        preset.name(),
        rots.len()
    ));
    spinner.enable_steady_tick(Duration::from_millis(100));
    let r = keys::keygen_with(dir, preset, &rots, refresh)?;
    spinner.finish_and_clear();
    report_keygen(dir, &r)
}

fn report_keygen(dir: &Path, r: &keys::KeygenReport) -> anyhow::Result<()> {
    for (p, n) in &r.files {
        println!("{:>10}  {}", bytes(*n), p.display());
    }
    let uploaded: u64 = r
        .files
        .iter()
        .filter(|(p, _)| !p.ends_with("secret.key") && !p.ends_with("preset"))
        .map(|(_, n)| n)
        .sum();
    println!("{:>10}  to upload in all", bytes(uploaded));
    println!("session {}", r.session);
    println!(
        "secret.key stays here (mode 0600); upload the rest with `hecloud upload --keys {}`",
        dir.display()
    );
    Ok(())
}

/// The comma- or whitespace-separated words of an input file.
pub(crate) fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
}

pub(crate) fn parse_values(text: &str) -> anyhow::Result<Vec<f64>> {
    words(text)
        .map(|s| {
            s.parse::<f64>()
                .with_context(|| format!("not a number: {s:?}"))
        })
        .collect()
}

/// Unsigned integers below `t`, comma or whitespace separated.
fn parse_integers(text: &str, t: u64) -> anyhow::Result<Vec<u64>> {
    words(text)
        .map(|s| {
            let v: u64 = s
                .parse()
                .with_context(|| format!("not an unsigned integer: {s:?}"))?;
            anyhow::ensure!(v < t, "{v} does not fit the plaintext modulus t = {t}");
            Ok(v)
        })
        .collect()
}

/// The one unsigned integer of an input file (TFHE, bits in slots).
fn one_integer(text: &str, input: &Path, what: &str) -> anyhow::Result<num_bigint::BigUint> {
    let words: Vec<&str> = words(text).collect();
    let [word] = words[..] else {
        anyhow::bail!(
            "{what} holds one integer; {} has {}",
            input.display(),
            words.len()
        );
    };
    word.parse()
        .with_context(|| format!("not an unsigned integer: {word:?}"))
}

/// `hecloud encrypt`.
pub fn encrypt(
    keys_dir: &Path,
    input: &Path,
    out: &Path,
    width: usize,
    bits_in_slots: bool,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        !bits_in_slots || keys::is_bgv_dir(keys_dir),
        "--bits-in-slots needs a BGV key folder"
    );
    if bits_in_slots {
        let kd = keys::BgvKeyDir::open(keys_dir)?;
        let text = std::fs::read_to_string(input)?;
        let v = one_integer(&text, input, "a bits-in-slots number")?;
        let ct = kd.encrypt_bits(&v, width)?;
        std::fs::write(out, &ct)?;
        println!(
            "{width}-bit integer in slots → {} ({}), object id {}",
            out.display(),
            bytes(ct.len() as u64),
            ObjectId::of(&ct)
        );
        return Ok(());
    }
    if keys::is_bgv_dir(keys_dir) {
        let kd = keys::BgvKeyDir::open(keys_dir)?;
        let values = parse_integers(&std::fs::read_to_string(input)?, kd.t())?;
        anyhow::ensure!(!values.is_empty(), "no values in {}", input.display());
        let ct = kd.encrypt(&values)?;
        std::fs::write(out, &ct)?;
        println!(
            "{} integers → {} ({}), object id {}",
            values.len(),
            out.display(),
            bytes(ct.len() as u64),
            ObjectId::of(&ct)
        );
        return Ok(());
    }
    if keys::is_tfhe_dir(keys_dir) {
        let text = std::fs::read_to_string(input)?;
        let v = one_integer(&text, input, "a TFHE ciphertext")?;
        let ct = keys::TfheKeyDir::open(keys_dir)?.encrypt(&v, width)?;
        std::fs::write(out, &ct)?;
        println!(
            "{width}-bit integer → {} ({}), object id {}",
            out.display(),
            bytes(ct.len() as u64),
            ObjectId::of(&ct)
        );
        return Ok(());
    }
    let kd = KeyDir::open(keys_dir)?;
    let values = parse_values(&std::fs::read_to_string(input)?)?;
    anyhow::ensure!(!values.is_empty(), "no values in {}", input.display());
    let ct = kd.encrypt(&values)?;
    std::fs::write(out, &ct)?;
    println!(
        "{} values → {} ({}), object id {}",
        values.len(),
        out.display(),
        bytes(ct.len() as u64),
        ObjectId::of(&ct)
    );
    Ok(())
}

/// `hecloud decrypt`; `bits_width`: a BGV bits-in-slots number of that
/// many bits.
pub fn decrypt(
    keys_dir: &Path,
    input: &Path,
    count: usize,
    bits_width: Option<usize>,
) -> anyhow::Result<()> {
    if let Some(width) = bits_width {
        anyhow::ensure!(
            keys::is_bgv_dir(keys_dir),
            "--bits-in-slots needs a BGV key folder"
        );
        let v = keys::BgvKeyDir::open(keys_dir)?.decrypt_bits(&std::fs::read(input)?, width)?;
        println!("{v}");
        return Ok(());
    }
    if keys::is_tfhe_dir(keys_dir) {
        println!(
            "{}",
            keys::TfheKeyDir::open(keys_dir)?.decrypt(&std::fs::read(input)?)?
        );
        return Ok(());
    }
    if keys::is_bgv_dir(keys_dir) {
        let v = keys::BgvKeyDir::open(keys_dir)?.decrypt(&std::fs::read(input)?)?;
        for x in v.iter().take(count) {
            println!("{x}");
        }
        return Ok(());
    }
    let kd = KeyDir::open(keys_dir)?;
    let v = kd.decrypt(&std::fs::read(input)?)?;
    for x in v.iter().take(count) {
        println!("{x}");
    }
    Ok(())
}

fn bar(total: u64, what: &str) -> (ProgressBar, ProgressFn) {
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template(
            "{msg:12} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    let p = pb.clone();
    (
        pb,
        Arc::new(move |done, total| {
            p.set_length(total);
            p.set_position(done);
        }),
    )
}

/// The kind an upload is announced as: what the payload's header says, a
/// session spec by its file name, else opaque bytes (the server stores those
/// unread; they cannot be a job input).
fn kind_of(path: &Path, data: &[u8]) -> &'static str {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if let Some(k) = hecloud_protocol::object::payload_kind(data) {
        rpc::object_kind_name(k)
    } else if name.ends_with(".spec") {
        rpc::SESSION_KIND
    } else {
        rpc::OPAQUE_KIND
    }
}

/// `hecloud upload`.
pub fn upload(
    conn: &Conn,
    keys_dir: Option<&Path>,
    kind: Option<&str>,
    files: &[PathBuf],
) -> anyhow::Result<()> {
    let mut todo: Vec<(PathBuf, Option<&str>)> = vec![];
    if let Some(k) = keys_dir {
        let uploads = if keys::is_tfhe_dir(k) {
            keys::tfhe_uploads(k)
        } else if keys::is_bgv_dir(k) {
            keys::BgvKeyDir::open(k)?.uploads()?
        } else {
            KeyDir::open(k)?.uploads()?
        };
        todo.extend(uploads.into_iter().map(|(p, kind)| (p, Some(kind))));
    }
    for f in files {
        anyhow::ensure!(
            !f.ends_with("secret.key"),
            "refusing to upload a secret key ({})",
            f.display()
        );
        todo.push((f.clone(), kind));
    }
    anyhow::ensure!(!todo.is_empty(), "nothing to upload (give files or --keys)");
    runtime()?.block_on(async {
        let c = conn.connect().await?;
        for (p, kind) in todo {
            let data = Arc::new(std::fs::read(&p).with_context(|| p.display().to_string())?);
            let kind = kind.unwrap_or_else(|| kind_of(&p, &data));
            let (pb, f) = bar(data.len() as u64, "upload");
            let o = c.upload(kind, data).progress(f).await?;
            pb.finish_and_clear();
            println!(
                "{}  {:16} {:>10}  {}",
                o.object_id,
                o.kind,
                bytes(o.size),
                p.display()
            );
        }
        Ok(())
    })
}

/// What to run for `hecloud submit`.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The operation: `stats` (mean and variance of one ciphertext of
    /// `--count` values), `mul-rotate-sum` (Σ x·y over `--count` slots),
    /// on TFHE integers `int-sum` (full-width sum of the inputs), `int-lt`,
    /// `int-gt` (an encrypted bit), `int-min`, `int-max`; on BGV integer
    /// vectors `bgv-sum` (slot-wise sum of the inputs), `bgv-mul` (product
    /// of two), `bgv-lt` (1 where x < y, for values below `--bound`),
    /// `bgv-slot-sum` (the sum of all slots); on BGV bits-in-slots numbers
    /// of `--width` bits `bgv-bits-add` (x + y mod 2^width), `bgv-bits-sum`
    /// (of two or more), `bgv-bits-lt`, `bgv-bits-gt` (an encrypted bit);
    /// or `spec` (an encoded job submission from `--spec`). With `--wait`,
    /// a BGV result is downloaded, decrypted and its first `--count` values
    /// (a bits-in-slots result: its value) printed.
    #[arg(long, default_value = "stats")]
    op: String,
    /// The values `bgv-lt` compares lie below this bound (2·bound ≤ t).
    #[arg(long, default_value_t = 16)]
    bound: u64,
    /// Bits of the bits-in-slots numbers of `bgv-bits-…` (2..=1024).
    #[arg(long, default_value_t = 32)]
    width: usize,
    /// Key folder (for the session id).
    #[arg(long)]
    keys: Option<PathBuf>,
    /// Input object ids.
    #[arg(long = "input")]
    inputs: Vec<String>,
    /// Number of values (a power of two is rounded up to for sums).
    #[arg(long, default_value_t = 1)]
    count: usize,
    /// An encoded job submission (`--op spec`).
    #[arg(long)]
    spec: Option<PathBuf>,
    /// Follow the job until it ends.
    #[arg(long)]
    wait: bool,
}

fn object_id(s: &str) -> anyhow::Result<ObjectId> {
    ObjectId::from_hex(s).with_context(|| format!("{s:?} is not an object id (64 hex)"))
}

/// `hecloud submit --op bgv-…`: runs the job, then decrypts and prints
/// the result.
fn submit_bgv(conn: &Conn, a: &SubmitArgs) -> anyhow::Result<()> {
    let dir = a
        .keys
        .as_deref()
        .context("--keys DIR (a BGV key folder) is needed")?;
    anyhow::ensure!(
        keys::is_bgv_dir(dir),
        "{} is not a BGV key folder",
        dir.display()
    );
    let ids: Vec<ObjectId> = a
        .inputs
        .iter()
        .map(|s| object_id(s))
        .collect::<anyhow::Result<_>>()?;
    let bits = hecloud_client::bgv::BITS_OPS.contains(&a.op.as_str());
    let job = if bits {
        let width = u32::try_from(a.width).context("--width")?;
        hecloud_client::bgv::bits_graph(keys::session_of(dir)?, &a.op, ids, width)?
    } else {
        hecloud_client::bgv::graph(keys::session_of(dir)?, &a.op, ids, a.bound)?
    };
    runtime()?.block_on(async {
        let c = conn.connect().await?;
        if !a.wait {
            let j = c.submit(rpc::JOB_KIND_GRAPH, job.encode(), "").await?;
            println!("job {}", j.job_id);
            return Ok(());
        }
        let kd = keys::BgvKeyDir::open(dir)?;
        let (j, out) = hecloud_client::bgv::run(&c, &kd, &job).await?;
        print_job(&j);
        for v in out {
            match a.op.as_str() {
                "bgv-bits-lt" | "bgv-bits-gt" => {
                    println!("{}", hecloud_client::bgv::decode_bit(&v, a.width)?);
                }
                _ if bits => println!("{}", hecloud_client::bgv::decode_bits(&v, a.width)?),
                "bgv-lt" => {
                    let answers = hecloud_client::bgv::decode_comparisons(&v)?;
                    let shown: Vec<&str> = answers
                        .iter()
                        .take(a.count)
                        .map(|&b| if b { "1" } else { "0" })
                        .collect();
                    println!("{}", shown.join(","));
                }
                _ => {
                    let shown: Vec<String> = v.iter().take(a.count).map(u64::to_string).collect();
                    println!("{}", shown.join(","));
                }
            }
        }
        Ok(())
    })
}

/// `hecloud submit`.
pub fn submit(conn: &Conn, a: &SubmitArgs) -> anyhow::Result<()> {
    if hecloud_client::bgv::OPS.contains(&a.op.as_str())
        || hecloud_client::bgv::BITS_OPS.contains(&a.op.as_str())
    {
        return submit_bgv(conn, a);
    }
    let spec = match a.op.as_str() {
        "spec" => std::fs::read(a.spec.as_ref().context("--op spec needs --spec FILE")?)?,
        op => {
            let dir = a
                .keys
                .as_deref()
                .context("--keys DIR is needed for the session")?;
            let ids: Vec<ObjectId> = a
                .inputs
                .iter()
                .map(|s| object_id(s))
                .collect::<anyhow::Result<_>>()?;
            let session = keys::session_of(dir)?;
            match op {
                "stats" => {
                    anyhow::ensure!(ids.len() == 1, "stats takes one --input");
                    workload::statistics_graph(session, ids[0], a.count).encode()
                }
                "mul-rotate-sum" => {
                    anyhow::ensure!(ids.len() == 2, "mul-rotate-sum takes two --input");
                    workload::mul_rotate_sum_graph(
                        session,
                        ids[0],
                        ids[1],
                        a.count.next_power_of_two(),
                        false,
                    )
                    .encode()
                }
                "int-sum" | "int-lt" | "int-gt" | "int-min" | "int-max" => {
                    workload::integer_graph(session, op, ids)?.encode()
                }
                other => anyhow::bail!(
                    "unknown --op {other:?} (stats, mul-rotate-sum, int-sum, int-lt, int-gt, int-min, int-max, bgv-sum, bgv-mul, bgv-lt, bgv-slot-sum, bgv-bits-add, bgv-bits-sum, bgv-bits-lt, bgv-bits-gt, spec)"
                ),
            }
        }
    };
    runtime()?.block_on(async {
        let c = conn.connect().await?;
        // A CKKS key folder answers the job's refresh requests while we wait.
        let holder = match a.keys.as_deref() {
            Some(dir) if a.wait && !keys::is_tfhe_dir(dir) && !keys::is_bgv_dir(dir) => {
                Some(Arc::new(keys::KeyDir::open(dir)?.refresh_responder()?))
            }
            _ => None,
        };
        let _session = match &holder {
            Some(h) => Some(c.serve_refreshes(h.clone()).await?),
            None => None,
        };
        let j = c.submit(rpc::JOB_KIND_GRAPH, spec, "").await?;
        println!("job {}", j.job_id);
        if a.wait {
            follow(&c, &j.job_id, holder.as_deref()).await?;
        }
        Ok(())
    })
}

fn state_name(s: i32) -> &'static str {
    match JobState::try_from(s).unwrap_or(JobState::Unspecified) {
        JobState::Queued => "queued",
        JobState::Running => "running",
        JobState::Succeeded => "succeeded",
        JobState::Failed => "failed",
        JobState::Cancelled => "cancelled",
        JobState::Unspecified => "unknown",
    }
}

fn print_job(j: &rpc::JobInfo) {
    println!(
        "job {} {} ({:.0}%) {}",
        j.job_id,
        state_name(j.state),
        j.progress * 100.0,
        j.message
    );
    if !j.error.is_empty() {
        println!("  error: {}", j.error);
    }
    if j.compute_micros > 0 {
        println!("  compute {:.1} ms", j.compute_micros as f64 / 1e3);
    }
    for o in &j.outputs {
        println!(
            "  output {:12} {} {} {}",
            o.name,
            o.object_id,
            o.kind,
            bytes(o.size)
        );
    }
}

/// Follows a job on a progress bar, with the refreshes `holder` (the key
/// holder serving the job, if any) has answered so far.
async fn follow(
    c: &Client,
    job: &str,
    holder: Option<&hecloud_protocol::refresh::RefreshResponder>,
) -> anyhow::Result<()> {
    let pb = ProgressBar::new(1000);
    pb.set_style(
        ProgressStyle::with_template("job [{bar:40}] {percent:>3}% {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let p = pb.clone();
    let j = c
        .wait(job, &move |j| {
            p.set_position((j.progress * 1000.0) as u64);
            let refreshed = holder.map(|h| h.stats()).filter(|s| s.requests > 0);
            p.set_message(match refreshed {
                Some(s) => format!(
                    "{} · {} refreshed in {} round trips",
                    j.message, s.ciphertexts, s.requests
                ),
                None => j.message.clone(),
            });
        })
        .await?;
    pb.finish_and_clear();
    print_job(&j);
    if let Some(s) = holder.map(|h| h.stats()).filter(|s| s.requests > 0) {
        println!(
            "  refreshed {} ciphertexts in {} round trips ({} to this key holder, {} back)",
            s.ciphertexts,
            s.requests,
            bytes(s.bytes_in),
            bytes(s.bytes_out)
        );
    }
    anyhow::ensure!(
        j.state == JobState::Succeeded as i32,
        "job {} did not succeed",
        j.job_id
    );
    Ok(())
}

/// `hecloud status`.
pub fn status(conn: &Conn, job: &str, watch: bool, cancel: bool) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let c = conn.connect().await?;
        if cancel {
            print_job(&c.cancel(job).await?);
        } else if watch {
            follow(&c, job, None).await?;
        } else {
            print_job(&c.job(job).await?);
        }
        Ok(())
    })
}

/// `hecloud download`.
pub fn download(conn: &Conn, object: &str, out: &Path) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let c = conn.connect().await?;
        let (pb, f) = bar(0, "download");
        let data = c.download(object, Some(f)).await?;
        pb.finish_and_clear();
        std::fs::write(out, &data)?;
        println!(
            "{} → {} ({}, hash checked)",
            object,
            out.display(),
            bytes(data.len() as u64)
        );
        Ok(())
    })
}
