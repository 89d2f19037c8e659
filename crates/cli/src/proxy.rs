//! `hecloud proxy` (the encryption proxy next to the server) and
//! `hecloud run --via-proxy` (plaintext in, plaintext out, through it).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use hecloud_protocol::Graph;
use hecloud_proxy::attest::ConfigfsTsm;
use hecloud_proxy::attest::snp::{MEASUREMENT_LEN, MinTcb, SigningKey, cert_der, crl_der};
use hecloud_proxy::attest::tdx::{MR_LEN, TEE_TCB_SVN_LEN, TdxVerified};
use hecloud_proxy::attest::{AttestError, Verified, VerifyPolicy};
use hecloud_proxy::service::DEFAULT_MAX_VECTORS;
use hecloud_proxy::{
    CvmEnclave, Enclave, PlainEnclave, ProxyClient, ProxyConfig, ProxyTenant, RunInput,
    SealedKeyStore, SealingKey, TlsSource, Zeroizing,
};

/// `hecloud proxy` options.
#[derive(Debug, Args)]
pub struct ProxyArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7444")]
    listen: SocketAddr,
    /// The hecloud server's URL.
    #[arg(long, env = "HECLOUD_SERVER", default_value = "https://localhost:7443")]
    server: String,
    /// CA certificate of the server (PEM); `hecloud serve` writes
    /// `<data-dir>/tls/ca.pem`.
    #[arg(long, env = "HECLOUD_CA", default_value = "hecloud-data/tls/ca.pem")]
    server_ca: PathBuf,
    /// The proxy's folder: its sealed key store (`keys/`), sealing key
    /// (`sealing.key`), tenants file (`tenants`) and generated TLS
    /// material (`tls/`; clients trust `tls/ca.pem`), unless given below.
    #[arg(long, default_value = "hecloud-proxy")]
    dir: PathBuf,
    /// Sealed key store (default `<dir>/keys`).
    #[arg(long)]
    store: Option<PathBuf>,
    /// Sealing key file (default `<dir>/sealing.key`; made, mode 0600, on
    /// first start).
    #[arg(long)]
    sealing_key: Option<PathBuf>,
    /// Tenants file (default `<dir>/tenants`): one tenant a line,
    /// `<name> <proxy token> <server token>`, the proxy token in clear (at
    /// least 16 characters) or as `blake3:<64 hex>`; `#` starts a comment.
    /// Keep it private (mode 0600): it holds the server tokens.
    #[arg(long)]
    tenants: Option<PathBuf>,
    /// Seals a client's clear key folder (`hecloud keygen`, CKKS or BGV)
    /// into the store for a tenant, inside the enclave, before serving:
    /// `TENANT=DIR` (repeatable). A tenant already in the store is kept.
    #[arg(long = "import-keys", value_name = "TENANT=DIR")]
    import_keys: Vec<String>,
    /// Most vectors (inputs) in one request.
    #[arg(long, default_value_t = DEFAULT_MAX_VECTORS)]
    max_vectors: usize,
    /// Where the secret operations run: `plain` (a plain process,
    /// unattested: clients must pass `--allow-unattested`) or `cvm` (inside
    /// an AMD SEV-SNP or Intel TDX confidential VM: attestation reports from
    /// configfs-tsm; on SEV-SNP the sealing key is derived by the secure
    /// processor from the chip and this proxy's launch measurement, unless
    /// `--sealing-key` names a file).
    #[arg(long, value_enum, default_value_t = EnclaveKind::Plain)]
    enclave: EnclaveKind,
}

/// `hecloud proxy --enclave`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum EnclaveKind {
    /// A plain process, unattested.
    Plain,
    /// Inside a confidential VM (configfs-tsm reports).
    Cvm,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Parses a tenants file (see [`ProxyArgs::tenants`]).
fn parse_tenants(text: &str) -> anyhow::Result<Vec<ProxyTenant>> {
    let mut out = vec![];
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [name, proxy_token, server_token] = fields[..] else {
            // The line may hold tokens: it is not echoed.
            anyhow::bail!(
                "tenants file line {}: expected `<name> <proxy token> <server token>` ({} fields)",
                i + 1,
                fields.len()
            );
        };
        let tenant = match proxy_token.strip_prefix("blake3:") {
            Some(hex) => {
                let hash: [u8; 32] = hex_decode(hex)
                    .and_then(|b| b.try_into().ok())
                    .with_context(|| {
                        format!("tenants file line {}: blake3: needs 64 hex digits", i + 1)
                    })?;
                ProxyTenant {
                    name: name.into(),
                    token_hash: hash,
                    server_token: Zeroizing::new(server_token.into()),
                }
            }
            None => ProxyTenant::new(name, proxy_token, server_token)
                .with_context(|| format!("tenants file line {}", i + 1))?,
        };
        out.push(tenant);
    }
    Ok(out)
}

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    // from_str_radix alone would take a sign: "+a" as 0x0a.
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Warns when the tenants file (it holds the server tokens) can be read
/// by other users.
fn warn_if_shared(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(m) = std::fs::metadata(path)
            && m.permissions().mode() & 0o077 != 0
        {
            eprintln!(
                "warning: {} can be read by other users (mode {:o}); it holds the server tokens: chmod 600 it",
                path.display(),
                m.permissions().mode() & 0o777
            );
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

/// The sealing key file, made on first start.
fn sealing_key_file(path: &Path) -> anyhow::Result<SealingKey> {
    if !path.exists() {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        SealingKey::generate()?.write_file(path)?;
        eprintln!("made a new sealing key {}", path.display());
    }
    SealingKey::from_file(path)
        .with_context(|| format!("reading the sealing key {}", path.display()))
}

/// The enclave `--enclave` asks for, and how the proxy announces itself.
fn open_enclave(a: &ProxyArgs) -> anyhow::Result<(Arc<dyn Enclave>, String)> {
    let key_file = || {
        sealing_key_file(
            &a.sealing_key
                .clone()
                .unwrap_or_else(|| a.dir.join("sealing.key")),
        )
    };
    match a.enclave {
        EnclaveKind::Plain => Ok((
            Arc::new(PlainEnclave::new(key_file()?)),
            "UNATTESTED: a plain process, no TEE; clients must pass --allow-unattested".into(),
        )),
        EnclaveKind::Cvm => {
            let tsm = ConfigfsTsm::default();
            let provider = CvmEnclave::probe(&tsm)
                .context("--enclave cvm: reading an attestation report from configfs-tsm")?;
            let device = Path::new(hecloud_proxy::cvm::SEV_GUEST_DEVICE);
            let (key, sealing) = if a.sealing_key.is_none() && device.exists() {
                let key = hecloud_proxy::cvm::snp_derived_sealing_key(device, 0)
                    .context("deriving the sealing key from the SEV-SNP secure processor")?;
                (key, "sealing key derived by the SEV-SNP secure processor")
            } else {
                (
                    key_file()?,
                    "sealing key from a file (keep it on the VM's encrypted disk)",
                )
            };
            Ok((
                Arc::new(CvmEnclave::new(Arc::new(PlainEnclave::new(key)), tsm)),
                format!("attested: configfs-tsm reports from {provider}; {sealing}"),
            ))
        }
    }
}

/// `hecloud proxy`.
pub fn serve(a: ProxyArgs) -> anyhow::Result<()> {
    crate::cmd::init_logging();
    // The proxy encrypts, uploads, downloads and decrypts ciphertexts of
    // tens to hundreds of MB per request, as the server does (off glibc
    // the call does nothing).
    hecloud_server::alloc::retain_freed_memory();
    let store_dir = a.store.clone().unwrap_or_else(|| a.dir.join("keys"));
    let (enclave, announce) = open_enclave(&a)?;
    let store = SealedKeyStore::new(&store_dir);
    for spec in &a.import_keys {
        let (tenant, dir) = spec
            .split_once('=')
            .with_context(|| format!("--import-keys {spec:?}: expected TENANT=DIR"))?;
        if store.contains(tenant)? {
            eprintln!("tenant {tenant} is already in the store; kept");
            continue;
        }
        store
            .seal_folder_in(enclave.as_ref(), tenant, Path::new(dir))
            .with_context(|| format!("sealing {dir} for tenant {tenant}"))?;
        eprintln!(
            "sealed {dir} for tenant {tenant} into {}",
            store_dir.display()
        );
    }
    let tenants_file = a.tenants.clone().unwrap_or_else(|| a.dir.join("tenants"));
    warn_if_shared(&tenants_file);
    let tenants = parse_tenants(
        &std::fs::read_to_string(&tenants_file)
            .with_context(|| format!("reading the tenants file {}", tenants_file.display()))?,
    )?;
    let server_ca_pem = crate::cmd::ca_for(&a.server, &a.server_ca, "the server's CA")?;
    let tls_dir = a.dir.join("tls");
    let config = ProxyConfig {
        listen: a.listen,
        server_url: a.server.clone(),
        server_ca_pem,
        store_dir,
        tls: TlsSource::Generated(tls_dir.clone()),
        tenants,
        max_vectors: a.max_vectors,
    };
    runtime()?.block_on(async move {
        let p = hecloud_proxy::service::start(config, enclave).await?;
        eprintln!(
            "hecloud proxy on {} in front of {} ({announce}); clients trust {}",
            p.addr,
            a.server,
            tls_dir.join("ca.pem").display()
        );
        p.wait().await?;
        anyhow::Ok(())
    })
}

/// `hecloud run` options.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The proxy's URL (`https://host:port`).
    #[arg(long = "via-proxy", env = "HECLOUD_PROXY")]
    via_proxy: String,
    /// Your proxy token.
    #[arg(long, env = "HECLOUD_PROXY_TOKEN", hide_env_values = true)]
    token: String,
    /// CA certificate of the proxy (PEM); `hecloud proxy` writes
    /// `<dir>/tls/ca.pem`.
    #[arg(
        long,
        env = "HECLOUD_PROXY_CA",
        default_value = "hecloud-proxy/tls/ca.pem"
    )]
    proxy_ca: PathBuf,
    /// Accepts a proxy that cannot prove it runs in a TEE (refused
    /// otherwise): it sees your data in clear.
    #[arg(long)]
    allow_unattested: bool,
    /// The launch measurement (96 hex digits) the proxy's SEV-SNP report
    /// must carry. Without it the report's signature, AMD chain, binding
    /// and policy are still verified, but any guest image passes (a
    /// warning says so). A TDX proxy is refused when only this is given
    /// (its MRTD is another value: pass --expect-mrtd).
    #[arg(long, env = "HECLOUD_PROXY_MEASUREMENT", value_name = "HEX")]
    expect_measurement: Option<String>,
    /// The MRTD (96 hex digits: the TD's build-time measurement) the
    /// proxy's TDX quote must carry. Without it the quote's signatures,
    /// Intel chain, binding and debug attribute are still verified, but
    /// any TD image passes (a warning says so). An SEV-SNP proxy is
    /// refused when only this is given (pass --expect-measurement).
    #[arg(long, env = "HECLOUD_PROXY_MRTD", value_name = "HEX")]
    expect_mrtd: Option<String>,
    /// An RTMR the proxy's TDX quote must carry, as `index=hex` (index 0
    /// to 3, 96 hex digits); may be given once per RTMR.
    #[arg(long, value_name = "N=HEX")]
    expect_rtmr: Vec<String>,
    /// Minimum TEE_TCB_SVN of the proxy's TDX quote (32 hex digits, the
    /// TDX module's and platform's security versions), compared byte by
    /// byte; a quote below it in any byte is refused. Without it a TDX
    /// module at any version passes (a note says so).
    #[arg(long, env = "HECLOUD_PROXY_MIN_TEE_TCB_SVN", value_name = "HEX")]
    min_tee_tcb_svn: Option<String>,
    /// Minimum security patch levels of the report's REPORTED_TCB, as
    /// comma-separated component=level pairs (components bootloader, tee,
    /// snp, microcode, and fmc for Turin; levels 0 to 255; components not
    /// named have no minimum), e.g. `bootloader=3,tee=0,snp=8,microcode=115`.
    /// A report below it in any component is refused. Without it a chip
    /// at any patch level passes (a note says so).
    #[arg(long, env = "HECLOUD_PROXY_MIN_TCB", value_name = "LEVELS")]
    min_tcb: Option<String>,
    /// Accepts an SEV-SNP report whose CHIP_ID the host masks (zeros):
    /// the VCEK then cannot be matched to the chip (its TCB still is).
    /// Refused otherwise.
    #[arg(long)]
    allow_masked_chip_id: bool,
    /// Refuses an SEV-SNP proxy whose platform has SMT enabled (the
    /// report's PLATFORM_INFO), a side-channel concern. Accepted otherwise.
    #[arg(long)]
    refuse_smt: bool,
    /// Refuses an SEV-SNP proxy whose guest policy allows a migration
    /// agent (MIGRATE_MA). Accepted otherwise.
    #[arg(long)]
    refuse_migration_agent: bool,
    /// The proxy chip's VCEK certificate (DER or PEM, e.g. from AMD's key
    /// distribution service), for a proxy whose host provisions no
    /// certificates; it is checked against AMD's pinned roots like one the
    /// proxy sends. Used for VCEK-signed reports only: a VLEK-signed one
    /// is verified with the VLEK and ASVK the proxy sends.
    #[arg(long, env = "HECLOUD_PROXY_VCEK", value_name = "FILE")]
    vcek: Option<PathBuf>,
    /// AMD's certificate revocation list (DER or PEM) of the proxy's
    /// product, from `https://kdsintf.amd.com/vcek/v1/<product>/crl`;
    /// repeatable, one per product. The chain's ASK or ASVK is then refused
    /// if that CRL lists it, and so is a proxy whose ARK has no current CRL
    /// among them. Without it revocation is not checked (a note says so).
    #[arg(long, value_name = "FILE")]
    amd_crl: Vec<PathBuf>,
    /// Intel's certificate revocation lists (DER or PEM): the SGX root
    /// CA's (`https://certificates.trustedservices.intel.com/IntelSGXRootCA.der`)
    /// and the PCK CA's (Intel PCS `/sgx/certification/v4/pckcrl?ca=platform`
    /// or `?ca=processor`); repeatable. A TDX proxy's PCK CA and PCK
    /// certificate are then refused if revoked, and so is one whose root or
    /// PCK CA has no current CRL among them. Without it revocation is not
    /// checked (a note says so).
    #[arg(long, value_name = "FILE")]
    intel_crl: Vec<PathBuf>,
    /// The operation: `add` (slot-wise sum of the inputs), `mul` (product
    /// of two), `square` (of one); with `--ints`, the same mod t.
    #[arg(long, default_value = "add")]
    op: String,
    /// The inputs are integers mod t, for a tenant holding BGV keys
    /// (`hecloud keygen --preset bgv-…`): each below the preset's plaintext
    /// modulus t (65537 for bgv-n13 … bgv-n15); the proxy refuses a value
    /// not below it. Without it the inputs are reals (a CKKS tenant).
    #[arg(long)]
    ints: bool,
    /// Values of the result to print.
    #[arg(long, default_value_t = 8)]
    count: usize,
    /// Input text files (reals, or integers with `--ints`; comma or
    /// whitespace separated), by position.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
}

fn parse_ints(text: &str) -> anyhow::Result<Vec<u64>> {
    crate::cmd::words(text)
        .map(|s| {
            s.parse::<u64>()
                .with_context(|| format!("not an integer from 0 to 2^64 - 1: {s:?}"))
        })
        .collect()
}

/// The graph of `op` over `n` inputs: CKKS operations on reals, BGV ones
/// (mod t) on integers (`ints`).
fn op_graph(op: &str, n: usize, ints: bool) -> anyhow::Result<Graph> {
    let mut g = Graph::new();
    let inputs: Vec<_> = (0..n as u32).map(|i| g.input(i)).collect();
    let out = match (op, inputs.as_slice()) {
        ("add", [_, ..]) if ints => g.bgv_sum(inputs.clone()),
        ("mul", [a, b]) if ints => g.bgv_mul(*a, *b),
        ("square", [a]) if ints => g.bgv_mul(*a, *a),
        ("add", [first, rest @ ..]) => rest.iter().fold(*first, |acc, x| g.add(acc, *x)),
        ("mul", [a, b]) => {
            let m = g.mul(*a, *b);
            g.rescale(m)
        }
        ("square", [a]) => {
            let m = g.mul(*a, *a);
            g.rescale(m)
        }
        ("add" | "mul" | "square", _) => {
            anyhow::bail!(
                "--op {op} does not take {n} inputs (add: one or more, mul: two, square: one)"
            )
        }
        _ => anyhow::bail!("unknown --op {op:?} (add, mul, square)"),
    };
    g.output(op, out);
    Ok(g)
}

/// The launch measurement from hex (`--expect-measurement`).
fn parse_measurement(hex: &str) -> anyhow::Result<[u8; MEASUREMENT_LEN]> {
    parse_hex(hex, "--expect-measurement")
}

/// `N` bytes from hex, for `flag`.
fn parse_hex<const N: usize>(hex: &str, flag: &str) -> anyhow::Result<[u8; N]> {
    let hex = hex.trim();
    hex_decode(hex)
        .and_then(|b| b.try_into().ok())
        .with_context(|| format!("{flag} needs {} hex digits ({} given)", 2 * N, hex.len()))
}

/// `index=hex` of `--expect-rtmr`.
fn parse_rtmr(text: &str) -> anyhow::Result<(usize, [u8; MR_LEN])> {
    let (index, hex) = text
        .split_once('=')
        .context("--expect-rtmr needs index=hex (index 0 to 3)")?;
    let index = match index.trim() {
        "0" => 0,
        "1" => 1,
        "2" => 2,
        "3" => 3,
        other => anyhow::bail!("--expect-rtmr index {other:?} is not 0 to 3"),
    };
    Ok((index, parse_hex(hex, "--expect-rtmr")?))
}

/// The client's attestation policy from `hecloud run`'s options.
fn verify_policy(a: &RunArgs) -> anyhow::Result<VerifyPolicy> {
    let mut policy = VerifyPolicy::new(a.allow_unattested);
    // A user who pins an image means that image: an unpinned proxy of the
    // other TEE's kind is refused, not let through with a warning.
    policy.require_measurement = a.expect_measurement.is_some() || a.expect_mrtd.is_some();
    policy.snp.allow_masked_chip_id = a.allow_masked_chip_id;
    policy.snp.refuse_smt = a.refuse_smt;
    policy.snp.refuse_migration_agent = a.refuse_migration_agent;
    if let Some(hex) = &a.expect_measurement {
        policy.snp.measurement = Some(parse_measurement(hex)?);
    }
    if let Some(text) = &a.min_tcb {
        policy.snp.min_tcb = Some(text.parse::<MinTcb>().context("--min-tcb")?);
    }
    if let Some(hex) = &a.expect_mrtd {
        policy.tdx.mrtd = Some(parse_hex(hex, "--expect-mrtd")?);
    }
    for text in &a.expect_rtmr {
        let (index, value) = parse_rtmr(text)?;
        if policy.tdx.rtmrs[index].replace(value).is_some() {
            anyhow::bail!("--expect-rtmr gives RTMR{index} twice");
        }
    }
    if let Some(hex) = &a.min_tee_tcb_svn {
        policy.tdx.min_tee_tcb_svn = Some(parse_hex::<TEE_TCB_SVN_LEN>(hex, "--min-tee-tcb-svn")?);
    }
    if let Some(path) = &a.vcek {
        policy.snp.vcek = Some(der_file(path, "VCEK", cert_der)?);
    }
    for (paths, crls) in [
        (&a.amd_crl, &mut policy.snp.crls),
        (&a.intel_crl, &mut policy.tdx.crls),
    ] {
        for path in paths {
            crls.push(der_file(path, "CRL", crl_der)?);
        }
    }
    Ok(policy)
}

/// The DER of the `what` (`VCEK`, `CRL`) in the DER or PEM file at `path`,
/// as `decode` reads it.
fn der_file(
    path: &Path,
    what: &str,
    decode: fn(&[u8]) -> Result<Vec<u8>, String>,
) -> anyhow::Result<Vec<u8>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    decode(&bytes)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("reading the {what} {}", path.display()))
}

/// What `hecloud run` says of a verified TDX proxy: what was compared,
/// what was not (warnings), and what cannot be without Intel's collateral.
fn tdx_lines(q: &TdxVerified) -> Vec<String> {
    let mut out = vec![if q.mrtd_pinned {
        format!(
            "the proxy is attested: TDX (PCK chain {} <- {}), MRTD {} as expected",
            q.root,
            q.pck_ca,
            q.mrtd_hex()
        )
    } else {
        format!(
            "warning: the proxy is attested (TDX, PCK chain {} <- {}) but its MRTD {} was not \
             compared with an expected one: pass --expect-mrtd",
            q.root,
            q.pck_ca,
            q.mrtd_hex()
        )
    }];
    let pinned: Vec<String> = (0..4)
        .filter(|&i| q.rtmrs_pinned[i])
        .map(|i| format!("RTMR{i}"))
        .collect();
    if !pinned.is_empty() {
        out.push(format!("the proxy's {} as expected", pinned.join(", ")));
    }
    out.push(if q.min_tee_tcb_svn_checked {
        format!(
            "the proxy's TEE_TCB_SVN {} meets --min-tee-tcb-svn",
            q.tee_tcb_svn_hex()
        )
    } else {
        format!(
            "note: the proxy's TEE_TCB_SVN {} was not compared with a minimum: pass \
             --min-tee-tcb-svn",
            q.tee_tcb_svn_hex()
        )
    });
    out.push(if q.revocation_checked {
        "the proxy's PCK CA and PCK certificate are not revoked by Intel's CRLs (--intel-crl)"
            .into()
    } else {
        "note: revocation was not checked: pass --intel-crl with Intel's root CA and PCK CRLs"
            .into()
    });
    out.push(
        "note: Intel's TCB status and QE identity were not checked (they need Intel's collateral)"
            .into(),
    );
    out
}

/// `hecloud run --via-proxy`.
pub fn run(a: RunArgs) -> anyhow::Result<()> {
    let graph = op_graph(&a.op, a.inputs.len(), a.ints)?;
    let mut inputs = vec![];
    for p in &a.inputs {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let reading = || format!("reading {}", p.display());
        inputs.push(if a.ints {
            RunInput::Ints(parse_ints(&text).with_context(reading)?)
        } else {
            RunInput::Values(crate::cmd::parse_values(&text).with_context(reading)?)
        });
    }
    let ca = crate::cmd::ca_for(&a.via_proxy, &a.proxy_ca, "the proxy's CA")?;
    let policy = verify_policy(&a)?;
    runtime()?.block_on(async move {
        let c = ProxyClient::connect_with(&a.via_proxy, &a.token, ca.as_deref(), &policy)
            .await
            .map_err(|e| match e {
                hecloud_proxy::ProxyClientError::Attestation(e @ AttestError::Unattested) => {
                    anyhow::anyhow!(
                        "the proxy's attestation is refused: {e}\n(pass --allow-unattested to accept a proxy without a TEE: it sees your data in clear)"
                    )
                }
                e => e.into(),
            })?;
        match c.verified() {
            Verified::Unattested => {
                eprintln!("warning: the proxy is unattested (allowed by --allow-unattested)")
            }
            Verified::SevSnp { report, .. } if report.measurement_pinned => eprintln!(
                "the proxy is attested: SEV-SNP ({}), measurement {} as expected",
                report.product,
                report.measurement_hex()
            ),
            Verified::SevSnp { report, .. } => eprintln!(
                "warning: the proxy is attested (SEV-SNP, {}) but its measurement {} was not \
                 compared with an expected one: pass --expect-measurement",
                report.product,
                report.measurement_hex()
            ),
            Verified::Tdx { quote, .. } => {
                for line in tdx_lines(quote) {
                    eprintln!("{line}");
                }
            }
            other => eprintln!("the proxy's attestation: {other:?}"),
        }
        if let Verified::SevSnp { report, .. } = c.verified() {
            if report.signed_by == SigningKey::Vlek {
                eprintln!(
                    "note: the proxy's report is signed by a VLEK (cloud provider {}): it is \
                     bound to the provider's key, not to a chip (no CHIP_ID check)",
                    report.csp_id.as_deref().unwrap_or("not named")
                );
            } else if !report.chip_id_checked {
                eprintln!(
                    "warning: the proxy's CHIP_ID is masked: its VCEK was not matched to the chip \
                     (allowed by --allow-masked-chip-id)"
                );
            }
            if report.min_tcb_checked {
                eprintln!(
                    "the proxy's reported TCB {:?} meets --min-tcb",
                    report.reported_tcb
                );
            } else {
                eprintln!(
                    "note: the proxy's reported TCB {:?} was not compared with a minimum: \
                     pass --min-tcb",
                    report.reported_tcb
                );
            }
            eprintln!(
                "{}",
                if report.revocation_checked {
                    "the proxy's ASK or ASVK is not revoked by AMD's CRL (--amd-crl)"
                } else {
                    "note: revocation was not checked: pass --amd-crl with AMD's CRL"
                }
            );
        }
        let r = c.run(inputs, &graph, a.count).await?;
        eprintln!("job {} (through the proxy)", r.job_id);
        for (name, id, values) in &r.outputs {
            let shown: Vec<String> = values.iter().map(|v| format!("{v:.6}")).collect();
            println!("{name} ({id}): {}", shown.join(" "));
        }
        for (name, id, values) in &r.int_outputs {
            let shown: Vec<String> = values.iter().map(u64::to_string).collect();
            println!("{name} ({id}): {}", shown.join(" "));
        }
        anyhow::Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_file() {
        let t = parse_tenants(
            "# name proxy-token server-token\n\
             alice alice-proxy-token-0123 alice-server-token-0123\n\n\
             bob blake3:0000000000000000000000000000000000000000000000000000000000000000 bob-server-token # comment\n",
        )
        .unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].name, "alice");
        assert_eq!(
            t[0].token_hash,
            *blake3_of("alice-proxy-token-0123").as_bytes()
        );
        assert_eq!(t[1].token_hash, [0; 32]);
        assert_eq!(t[1].server_token.as_str(), "bob-server-token");
        for bad in [
            "alice short server-token",
            "alice only-two-fields-here",
            "bob blake3:00 server",
        ] {
            let e = parse_tenants(bad).unwrap_err().to_string();
            assert!(!e.contains("server-token"), "a token is echoed: {e}");
        }
    }

    fn blake3_of(s: &str) -> blake3::Hash {
        blake3::hash(s.as_bytes())
    }

    #[test]
    fn graphs() {
        for ints in [false, true] {
            assert!(op_graph("add", 3, ints).is_ok());
            assert!(op_graph("add", 1, ints).is_ok());
            assert!(op_graph("mul", 2, ints).is_ok());
            assert!(op_graph("mul", 3, ints).is_err());
            assert!(op_graph("square", 1, ints).is_ok());
            assert!(op_graph("add", 0, ints).is_err());
            assert!(op_graph("div", 2, ints).is_err());
        }
        // Integers get BGV operations, reals CKKS ones.
        let names = |ints| {
            op_graph("mul", 2, ints)
                .unwrap()
                .nodes
                .iter()
                .map(|op| op.name())
                .collect::<Vec<_>>()
        };
        assert!(names(true).contains(&"bgv_mul"), "{:?}", names(true));
        assert!(!names(false).iter().any(|n| n.starts_with("bgv")));
    }

    #[test]
    fn integer_inputs() {
        assert_eq!(parse_ints("1, 2 3\n65536").unwrap(), [1, 2, 3, 65536]);
        for bad in ["-1", "1.5", "x", "18446744073709551616"] {
            let e = format!("{:#}", parse_ints(bad).unwrap_err());
            assert!(e.contains("not an integer"), "{bad}: {e}");
        }
    }

    #[test]
    fn measurements_and_policy() {
        let hex = "a1".repeat(48);
        assert_eq!(parse_measurement(&hex).unwrap(), [0xa1; 48]);
        assert_eq!(
            parse_measurement(&format!(" {} \n", hex.to_uppercase())).unwrap(),
            [0xa1; 48]
        );
        for bad in [
            "",
            "a1",
            &"a1".repeat(47),
            &"a1".repeat(49),
            &"zz".repeat(48),
            // A sign that u8::from_str_radix would take.
            &format!("+a{}", "a1".repeat(47)),
        ] {
            assert!(parse_measurement(bad).is_err(), "{bad:?}");
        }
        let dir = tempfile::tempdir().unwrap();
        let vcek = dir.path().join("vcek.der");
        std::fs::write(&vcek, b"\x30\x03\x02\x01\x01").unwrap();
        let args = |m: Option<&str>, v: Option<PathBuf>| RunArgs {
            expect_measurement: m.map(String::from),
            vcek: v,
            ..run_args()
        };
        let p = verify_policy(&args(None, None)).unwrap();
        assert_eq!((p.snp.measurement, p.snp.vcek.is_none()), (None, true));
        assert_eq!(p.snp.roots.len(), 3);
        let p = verify_policy(&args(Some(&hex), Some(vcek))).unwrap();
        assert_eq!(p.snp.measurement, Some([0xa1; 48]));
        assert_eq!(p.snp.vcek.as_deref(), Some(&b"\x30\x03\x02\x01\x01"[..]));
        assert!(verify_policy(&args(Some("00"), None)).is_err());
        // --min-tcb: parsed into the policy, malformed text refused.
        assert_eq!(p.snp.min_tcb, None);
        assert!(!p.snp.allow_masked_chip_id);
        let mut a = args(None, None);
        a.allow_masked_chip_id = true;
        assert!(verify_policy(&a).unwrap().snp.allow_masked_chip_id);
        assert!(!p.snp.refuse_smt && !p.snp.refuse_migration_agent);
        a.refuse_smt = true;
        let q = verify_policy(&a).unwrap();
        assert!(q.snp.refuse_smt && !q.snp.refuse_migration_agent);
        a.refuse_migration_agent = true;
        assert!(verify_policy(&a).unwrap().snp.refuse_migration_agent);
        let mut a = args(None, None);
        a.min_tcb = Some("bootloader=3,tee=0,snp=8,microcode=115".into());
        assert_eq!(
            verify_policy(&a).unwrap().snp.min_tcb,
            Some(MinTcb {
                fmc: 0,
                boot_loader: 3,
                tee: 0,
                snp: 8,
                microcode: 115
            })
        );
        for bad in ["", "snp=300", "snp:8", "cpu=1", "snp=1,snp=1"] {
            a.min_tcb = Some(bad.into());
            let e = format!("{:#}", verify_policy(&a).unwrap_err());
            assert!(
                e.contains("--min-tcb") && e.contains("malformed minimum TCB"),
                "{bad:?}: {e}"
            );
        }
        assert!(verify_policy(&args(None, Some(dir.path().join("absent")))).is_err());
        // --amd-crl: DER kept, PEM decoded, a PEM certificate refused.
        let [der, pem, cert] = ["crl.der", "crl.pem", "cert.pem"].map(|f| dir.path().join(f));
        std::fs::write(&der, b"\x30\x00").unwrap();
        std::fs::write(
            &pem,
            "-----BEGIN X509 CRL-----\nMAA=\n-----END X509 CRL-----\n",
        )
        .unwrap();
        std::fs::write(
            &cert,
            "-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let mut a = args(None, None);
        a.amd_crl = vec![der.clone(), pem];
        a.intel_crl = vec![der];
        let with_crls = verify_policy(&a).unwrap();
        assert_eq!(with_crls.snp.crls, [b"\x30\x00"; 2]);
        assert_eq!(with_crls.tdx.crls, [b"\x30\x00"]);
        a.amd_crl = vec![cert];
        let e = format!("{:#}", verify_policy(&a).unwrap_err());
        assert!(e.contains("CRL") && e.contains("CERTIFICATE"), "{e}");

        // TDX: nothing pinned by default, Intel's root.
        assert_eq!(p.tdx, hecloud_proxy::attest::tdx::TdxPolicy::default());
        let mut a = args(None, None);
        a.expect_mrtd = Some("b2".repeat(48));
        a.expect_rtmr = vec![
            format!("1={}", "c3".repeat(48)),
            format!(" 3 ={}", "d4".repeat(48)),
        ];
        a.min_tee_tcb_svn = Some(format!("0301{}", "00".repeat(14)));
        let t = verify_policy(&a).unwrap().tdx;
        assert_eq!(t.mrtd, Some([0xb2; 48]));
        assert_eq!(t.rtmrs, [None, Some([0xc3; 48]), None, Some([0xd4; 48])]);
        let mut svn = [0u8; 16];
        (svn[0], svn[1]) = (3, 1);
        assert_eq!(t.min_tee_tcb_svn, Some(svn));
        assert_eq!(
            t.roots,
            vec![hecloud_proxy::attest::tdx::TrustedRoot::intel()]
        );
        // The SEV-SNP side is untouched by TDX flags.
        assert_eq!(verify_policy(&a).unwrap().snp, p_default_snp());
        for (mrtd, rtmr, svn, flag) in [
            (Some("b2"), None, None, "--expect-mrtd"),
            (None, Some("4=00".to_string()), None, "--expect-rtmr"),
            (
                None,
                Some(format!("x={}", "00".repeat(48))),
                None,
                "--expect-rtmr",
            ),
            (None, Some("00".repeat(48)), None, "--expect-rtmr"),
            (
                None,
                Some(format!("0={}", "00".repeat(47))),
                None,
                "--expect-rtmr",
            ),
            (None, None, Some("00".repeat(15)), "--min-tee-tcb-svn"),
            (None, None, Some("zz".repeat(16)), "--min-tee-tcb-svn"),
        ] {
            let mut a = args(None, None);
            a.expect_mrtd = mrtd.map(String::from);
            a.expect_rtmr = rtmr.into_iter().collect();
            a.min_tee_tcb_svn = svn;
            let e = format!("{:#}", verify_policy(&a).unwrap_err());
            assert!(e.contains(flag), "{flag}: {e}");
        }
        let mut a = args(None, None);
        a.expect_rtmr = vec![format!("2={}", "00".repeat(48)); 2];
        let e = format!("{:#}", verify_policy(&a).unwrap_err());
        assert!(e.contains("RTMR2 twice"), "{e}");
    }

    fn p_default_snp() -> hecloud_proxy::attest::snp::SnpPolicy {
        hecloud_proxy::attest::snp::SnpPolicy::default()
    }

    fn tdx_verified(mrtd_pinned: bool, svn_checked: bool) -> TdxVerified {
        use hecloud_proxy::attest::tdx::TdReport;
        TdxVerified {
            root: "Intel SGX Root CA".into(),
            pck_ca: "Intel SGX PCK Platform CA".into(),
            qe_svn: 8,
            pce_svn: 13,
            report: TdReport {
                tee_tcb_svn: [1; 16],
                mrseam: [0; 48],
                mrsignerseam: [0; 48],
                seam_attributes: 0,
                td_attributes: 0,
                xfam: 0,
                mrtd: [0xab; 48],
                mrconfigid: [0; 48],
                mrowner: [0; 48],
                mrownerconfig: [0; 48],
                rtmrs: [[0; 48]; 4],
                report_data: [0; 64],
            },
            mrtd_pinned,
            rtmrs_pinned: [false, true, false, true],
            min_tee_tcb_svn_checked: svn_checked,
            revocation_checked: svn_checked,
        }
    }

    #[test]
    fn what_is_said_of_a_tdx_proxy() {
        let lines = tdx_lines(&tdx_verified(true, true));
        assert!(
            lines[0].starts_with("the proxy is attested: TDX"),
            "{lines:?}"
        );
        assert!(lines[0].contains(&"ab".repeat(48)), "{lines:?}");
        assert_eq!(lines[1], "the proxy's RTMR1, RTMR3 as expected");
        assert!(lines[2].contains("meets --min-tee-tcb-svn"), "{lines:?}");
        assert!(lines[3].contains("not revoked"), "{lines:?}");
        assert!(lines[4].contains("not checked"), "{lines:?}");
        let lines = tdx_lines(&tdx_verified(false, false));
        assert!(lines[0].starts_with("warning:") && lines[0].contains("--expect-mrtd"));
        assert!(lines[2].starts_with("note:") && lines[2].contains("--min-tee-tcb-svn"));
        assert!(lines[3].starts_with("note:") && lines[3].contains("--intel-crl"));
    }

    /// `hecloud run --via-proxy` arguments with nothing pinned.
    fn run_args() -> RunArgs {
        RunArgs {
            min_tcb: None,
            allow_masked_chip_id: false,
            refuse_smt: false,
            refuse_migration_agent: false,
            via_proxy: "https://localhost:7444".into(),
            token: "t".into(),
            proxy_ca: "ca.pem".into(),
            allow_unattested: false,
            expect_measurement: None,
            expect_mrtd: None,
            expect_rtmr: vec![],
            min_tee_tcb_svn: None,
            vcek: None,
            amd_crl: vec![],
            intel_crl: vec![],
            op: "add".into(),
            ints: false,
            count: 8,
            inputs: vec![],
        }
    }

    #[test]
    fn a_pin_for_either_tee_requires_a_pinned_measurement() {
        let args = |m: Option<&str>, t: Option<&str>| RunArgs {
            expect_measurement: m.map(String::from),
            expect_mrtd: t.map(String::from),
            ..run_args()
        };
        let hex = "a1".repeat(48);
        for (m, t, required) in [
            (Some(hex.as_str()), None, true),
            (None, Some(hex.as_str()), true),
            (None, None, false),
        ] {
            let p = verify_policy(&args(m, t)).unwrap();
            assert_eq!(p.require_measurement, required, "{m:?} {t:?}");
        }
    }
}
