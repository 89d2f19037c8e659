//! `hecloud bench refresh`: client-aided refresh (the server masks, the key
//! holder decrypts and encrypts again at the top level, the server unmasks)
//! against Lattigo v6.2.0's CKKS bootstrapping, in the same run.
//!
//! 1. One refresh of a full-slot random vector from the lowest level the
//!    session's mask allows to the top level, as a job `input → refresh(top)
//!    → drop_for_decryption → output` through the embedded TLS server, the
//!    client answering the refresh request (`Client::serve_refreshes`). The
//!    output is dropped to the lowest level that decodes with a check
//!    (`CkksParameters::checked_decoding_level`) only so that its download
//!    is small: dropping limbs
//!    does not change the precision, and the refresh itself still produces
//!    (and sends back) a top-level ciphertext. The key holder sits on
//!    loopback, then behind the emulated wide-area link
//!    ([`netem::Link::DEFAULT`]). The end-to-end refresh is the job's server
//!    compute time (it includes the wait for the key holder); mask, unmask
//!    and the key holder's decrypt and encrypt are timed in-process on a
//!    ciphertext of the same level. The transfer is measured per direction
//!    (named from the key holder's side, as the bytes: up = the masked
//!    request to the key holder, down = the reply back to the server): the
//!    key holder's connection always goes through a [`netem`] relay (on
//!    loopback an unshaped pass-through, which adds one user-space copy each
//!    way), which stamps the chunks at the server's side, and the key
//!    holder's callback stamps when it got the request and when it handed
//!    back the reply. Up runs from the first request byte leaving the server
//!    to the callback's start, down from the callback's end to the last reply
//!    byte reaching the server, both found by counting the payload's bytes
//!    ([`netem::first_of_last`], [`netem::last_of_first`]). So the gRPC
//!    framing at both ends and the TLS records are transfer, and what is
//!    left of the end-to-end time (the server's scheduling, its gRPC encoding
//!    of the request and decoding of the reply) is `other_ms`. Where a
//!    direction cannot be found the reason is printed and the transfer is
//!    the combined figure, end to end minus the measured work.
//! 2. Lattigo's bootstrapping (`lattigo_boot::boot`, one goroutine), skipped
//!    with the reason printed when memory is short; ratios refresh / boot.
//! 3. The deep computation: a degree-63 Chebyshev approximation of
//!    sin(πx)/2 applied four times to full-slot inputs in [−1, 1], refreshed
//!    before each application whose operand lacks the depth (to the top
//!    level, and to the lowest level that leaves exactly the depth needed),
//!    against Lattigo's `deep` with bootstrapping. A polynomial returns its
//!    input's scale exactly and a refresh keeps it, so the applications
//!    chain with no scale fix in between.
//!
//! Lattigo runs with `GOMAXPROCS=1`, our server and key holder share a
//! one-thread rayon pool. Full: N = 2^16 and 2^15, Lattigo at 2^16. `--quick`:
//! refresh at N = 2^14 and Lattigo at its insecure 2^14 test size; the deep
//! computation runs at N = 2^15 there, since a degree-63 polynomial needs 7
//! levels and N = 2^14 has 6 (4 above the lowest refreshable level).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hecloud_ckks::polynomial::ChebyshevPolynomial;
use hecloud_ckks::precision::{PrecisionReport, report_real};
use hecloud_ckks::refresh::{CkksMask, reencrypt};
use hecloud_ckks::{Encoder, Preset};
use hecloud_client::Client;
use hecloud_protocol::refresh::{CALLBACK_REFRESH, RefreshResponder, RefreshRound};
use hecloud_protocol::{Graph, JobSubmission, ObjectKind};
use hecloud_rlwe::{Ciphertext, Decryptor, SecretKey};

use crate::BenchOptions;
use crate::embedded::Embedded;
use crate::netem::{self, Link, Method};
use crate::peers::lattigo_boot::{self, BootFigures, DeepFigures};
use crate::report::{ResultLine, Table, bytes, cpu_name};
use crate::workload::{self, CkksSession};

/// Target: a refresh on loopback takes at most 1/50 of a bootstrapping.
const LOOPBACK_FACTOR: f64 = 50.0;
/// Target: a refresh over the default wide-area link takes at most 1/20.
const WAN_FACTOR: f64 = 20.0;
/// Target: precision after a refresh at most this many bits below a fresh
/// encryption's at the same scale.
const PRECISION_SLACK_BITS: f64 = 1.0;
/// Degree of the deep computation's polynomial (as Lattigo's peer).
const DEGREE: usize = 63;
/// Applications of the polynomial in a row (as Lattigo's peer).
const APPLICATIONS: usize = 4;
/// The quick Lattigo size (N = 2^14) peaked at 3.3 GB resident: this leaves
/// room for our server beside it.
const QUICK_MIN_FREE_BYTES: u64 = 6 << 30;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The median of `v` (NaN for none); sorts `v`.
fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The transfer of one refresh per direction, in milliseconds, named from
/// the key holder's side.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transfer {
    /// The masked request, server → key holder.
    pub up_ms: f64,
    /// The reply, key holder → server.
    pub down_ms: f64,
}

/// Where the time of one refresh went, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeSplit {
    /// The job's server compute time: mask, round trip to the key holder, unmask.
    pub end_to_end_ms: f64,
    /// Server: masking and encoding the request.
    pub mask_ms: f64,
    /// Key holder: decryption of the masked ciphertext.
    pub decrypt_ms: f64,
    /// Key holder: the rest of `reencrypt` (lift to the target level, encrypt).
    pub encrypt_ms: f64,
    /// Key holder: decoding the request and encoding the reply.
    pub codec_ms: f64,
    /// Server: decoding the reply and unmasking.
    pub unmask_ms: f64,
    /// The transfer measured per direction, if it could be.
    pub transfer: Option<Transfer>,
}

impl TimeSplit {
    /// End to end minus the work measured in-process.
    fn unworked_ms(&self) -> f64 {
        self.end_to_end_ms
            - (self.mask_ms + self.decrypt_ms + self.encrypt_ms + self.codec_ms + self.unmask_ms)
    }

    /// The transfer, both directions: their sum where measured, else what
    /// the measured work leaves of the end-to-end time. Not clamped: a
    /// negative value says the in-process figures do not fit the server's
    /// (noise, or a slower run), and hiding that would hide a wrong split.
    ///
    /// ```
    /// use hecloud_bench::refresh::{TimeSplit, Transfer};
    /// let mut s = TimeSplit {
    ///     end_to_end_ms: 100.0, mask_ms: 10.0, decrypt_ms: 5.0,
    ///     encrypt_ms: 20.0, codec_ms: 1.0, unmask_ms: 4.0, transfer: None,
    /// };
    /// assert_eq!(s.transfer_ms(), 60.0);
    /// assert_eq!(s.other_ms(), 0.0);
    /// s.transfer = Some(Transfer { up_ms: 30.0, down_ms: 25.0 });
    /// assert_eq!(s.transfer_ms(), 55.0);
    /// assert_eq!(s.other_ms(), 5.0);
    /// ```
    pub fn transfer_ms(&self) -> f64 {
        match self.transfer {
            Some(t) => t.up_ms + t.down_ms,
            None => self.unworked_ms(),
        }
    }

    /// End to end minus every part: zero when the transfer is not measured
    /// per direction (it is then this remainder).
    pub fn other_ms(&self) -> f64 {
        self.unworked_ms() - self.transfer_ms()
    }
}

/// Before each application of the polynomial, the level to refresh its
/// operand to (`None`: no refresh), starting from a ciphertext at `top`.
/// An operand is refreshed when it lacks `depth` levels, plus, unless it is
/// the last application, the `lowest` level a refresh needs afterwards. It
/// goes to `top`, or with `exact` to the lowest level that leaves exactly
/// that much (fewer bytes each way). `None` when the levels cannot hold it.
///
/// ```
/// use hecloud_bench::refresh::deep_plan;
/// // N = 2^16: 27 levels, degree 63 takes 7, a refresh needs level 2.
/// assert_eq!(deep_plan(27, 2, 7, 4, false), Some(vec![None, None, None, Some(27)]));
/// assert_eq!(deep_plan(27, 2, 7, 4, true), Some(vec![None, None, None, Some(7)]));
/// ```
pub fn deep_plan(
    top: usize,
    lowest: usize,
    depth: usize,
    applications: usize,
    exact: bool,
) -> Option<Vec<Option<usize>>> {
    let mut level = top;
    let mut plan = Vec::with_capacity(applications);
    for i in 0..applications {
        let need = depth + if i + 1 == applications { 0 } else { lowest };
        if need > top {
            return None;
        }
        if level < need {
            if level < lowest {
                return None;
            }
            let target = if exact { need } else { top };
            plan.push(Some(target));
            level = target;
        } else {
            plan.push(None);
        }
        level -= depth;
    }
    Some(plan)
}

/// Lattigo's figures, or why it did not run.
pub(crate) type Peer<T> = std::result::Result<T, String>;

pub(crate) fn lattigo<T>(
    what: &str,
    min_free: u64,
    f: impl FnOnce() -> anyhow::Result<T>,
) -> Peer<T> {
    if let Some(free) = lattigo_boot::free_memory_bytes()
        && free < min_free
    {
        let why = format!(
            "{} of memory available, {} needed",
            bytes(free),
            bytes(min_free)
        );
        println!("Lattigo {what}: skipped ({why})");
        return Err(why);
    }
    let t = Instant::now();
    let r = f().map_err(|e| e.to_string());
    match &r {
        Ok(_) => println!(
            "Lattigo {what}: done in {:.1} s (process wall time, key generation included)",
            t.elapsed().as_secs_f64()
        ),
        Err(e) => println!("Lattigo {what}: skipped (it failed: {e})"),
    }
    r
}

/// Runs the experiment.
pub fn run(opts: &BenchOptions) -> anyhow::Result<()> {
    // One thread on our side as on Lattigo's. Fails only if the global pool
    // already exists (another experiment ran first in this process): the
    // thread count is printed either way.
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build_global();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(bench(opts))
}

fn random_unit(count: usize) -> Vec<f64> {
    workload::random_values(count)
        .into_iter()
        .map(|v| v / 10.0)
        .collect()
}

fn secret_copy(s: &CkksSession) -> anyhow::Result<SecretKey> {
    Ok(SecretKey::from_coefficients(
        s.params.rlwe(),
        &s.keys.secret_key().export_coefficients(),
    )?)
}

fn encrypt_at(s: &CkksSession, values: &[f64], level: usize) -> anyhow::Result<Ciphertext> {
    let enc = Encoder::new(&s.params);
    let pt = enc.encode_real(values, level, s.params.default_scale())?;
    Ok(s.keys.encrypt_sk(&pt)?)
}

fn precision(s: &CkksSession, ct: &Ciphertext, want: &[f64]) -> anyhow::Result<PrecisionReport> {
    let got = Encoder::new(&s.params).decode_real(&s.keys.decrypt(ct)?)?;
    Ok(report_real(want, &got))
}

/// One measured refresh job.
struct JobRun {
    compute_ms: f64,
    after: PrecisionReport,
    up: u64,
    down: u64,
    transfer: Result<Transfer, String>,
}

/// When the key holder's callback last started and ended.
type CallbackClock = Arc<std::sync::Mutex<Option<(Instant, Instant)>>>;

/// Opens `client`'s key-holder session as [`Client::serve_refreshes`] does,
/// stamping each callback in `clock`: the stamps bound the two transfers on
/// the key holder's side, and `serve_refreshes` offers no hook for them.
async fn serve_timed(
    client: &Client,
    responder: Arc<RefreshResponder>,
    clock: CallbackClock,
) -> anyhow::Result<hecloud_client::SessionHandle> {
    Ok(client
        .open_session(
            &[CALLBACK_REFRESH],
            Arc::new(move |kind: &str, payload: &[u8]| {
                let start = Instant::now();
                if kind != CALLBACK_REFRESH {
                    return Err(format!(
                        "this key holder answers refresh requests, not `{kind}`"
                    ));
                }
                let reply = responder.answer(payload).map_err(|e| e.to_string());
                *clock.lock().unwrap() = Some((start, Instant::now()));
                reply
            }),
        )
        .await?)
}

/// The transfer per direction of the one refresh in `traffic` (recorded by
/// the relay at the server's side) and `clock` (the key holder's callback),
/// `up` request and `down` reply payload bytes.
fn transfer_of(
    traffic: &netem::Traffic,
    clock: Option<(Instant, Instant)>,
    up: u64,
    down: u64,
) -> Result<Transfer, String> {
    let (got, answered) = clock.ok_or("the key holder's callback did not run")?;
    let sent = netem::first_of_last(&traffic.from_target, got, up).ok_or_else(|| {
        format!("the relay saw fewer than the request's {up} bytes leave the server")
    })?;
    let back = netem::last_of_first(&traffic.to_target, answered, down).ok_or_else(|| {
        format!("the relay saw fewer than the reply's {down} bytes reach the server")
    })?;
    Ok(Transfer {
        up_ms: ms(got - sent),
        down_ms: ms(back - answered),
    })
}

/// `input → refresh(top) → drop_level(checked) → output`, the input encrypted at
/// `level`; the client's key-holder session must be open (through `relay`,
/// stamping `clock`).
async fn refresh_job(
    client: &Client,
    s: &CkksSession,
    responder: &RefreshResponder,
    relay: &netem::Relay,
    clock: &CallbackClock,
    level: usize,
) -> anyhow::Result<JobRun> {
    let values = random_unit(s.params.slots());
    let ct = encrypt_at(s, &values, level)?;
    let input = workload::upload_object(client, ObjectKind::CkksCiphertext, ct.to_bytes()).await?;
    let mut g = Graph::new();
    let x = g.input(0);
    let top = s.params.max_level();
    let r = g.refresh(x, top as u32);
    let out = g.drop_for_decryption(r);
    g.output("y", out);
    let before = responder.stats();
    *clock.lock().unwrap() = None;
    relay.record();
    let job = workload::run_job(
        client,
        &JobSubmission {
            session: s.id,
            graph: g,
            inputs: vec![input],
        },
    )
    .await?;
    let traffic = relay.take_traffic();
    let after_stats = responder.stats();
    anyhow::ensure!(
        after_stats.ciphertexts == before.ciphertexts + 1,
        "the job refreshed {} ciphertexts through this key holder, not 1",
        after_stats.ciphertexts - before.ciphertexts
    );
    let bytes = workload::output(client, &job, "y").await?;
    let out = Ciphertext::from_bytes(s.params.rlwe(), &bytes)?;
    let _ = client.delete(&input.to_hex()).await;
    let (up, down) = (
        after_stats.bytes_in - before.bytes_in,
        after_stats.bytes_out - before.bytes_out,
    );
    Ok(JobRun {
        compute_ms: job.compute_micros as f64 / 1e3,
        after: precision(s, &out, &values)?,
        up,
        down,
        transfer: transfer_of(&traffic, *clock.lock().unwrap(), up, down),
    })
}

/// Medians of `reps` refresh jobs (after one warm-up job that loads the
/// session's keys on the server).
struct LinkFigures {
    end_to_end_ms: f64,
    after_bits: f64,
    up: u64,
    down: u64,
    /// Medians per direction, or why a repetition could not be split.
    transfer: Result<Transfer, String>,
}

/// `client` must be connected through `relay`.
async fn refresh_jobs(
    client: &Client,
    relay: &netem::Relay,
    s: &CkksSession,
    level: usize,
    reps: usize,
) -> anyhow::Result<LinkFigures> {
    let responder = Arc::new(RefreshResponder::new().with_ckks(s.params.clone(), secret_copy(s)?));
    let clock = CallbackClock::default();
    let holder = serve_timed(client, responder.clone(), clock.clone()).await?;
    refresh_job(client, s, &responder, relay, &clock, level).await?;
    let mut times = vec![];
    let mut bits = vec![];
    let (mut up, mut down) = (0, 0);
    let (mut ups, mut downs) = (vec![], vec![]);
    let mut unsplit = None;
    for _ in 0..reps {
        let r = refresh_job(client, s, &responder, relay, &clock, level).await?;
        times.push(r.compute_ms);
        bits.push(r.after.bits());
        (up, down) = (r.up, r.down);
        match r.transfer {
            Ok(t) => {
                ups.push(t.up_ms);
                downs.push(t.down_ms);
            }
            Err(why) => unsplit = Some(why),
        }
    }
    // Closed before another client serves: the server asks any one of the
    // tenant's key holders.
    drop(holder);
    Ok(LinkFigures {
        end_to_end_ms: median(&mut times),
        after_bits: median(&mut bits),
        up,
        down,
        // One repetition that cannot be split makes the medians those of
        // other runs than the end-to-end one: fall back for all.
        transfer: match unsplit {
            Some(why) => Err(why),
            None => Ok(Transfer {
                up_ms: median(&mut ups),
                down_ms: median(&mut downs),
            }),
        },
    })
}

/// Mask, key holder and unmask timed in-process on a ciphertext at `level`
/// (medians of `reps`), with the end-to-end time left to fill in.
fn split_in_process(s: &CkksSession, level: usize, reps: usize) -> anyhow::Result<TimeSplit> {
    let params = &s.params;
    let top = params.max_level();
    let policy = s.spec.refresh.map(|r| r.mask_policy()).unwrap_or_default();
    let pk = s.keys.public_key();
    let sk = secret_copy(s)?;
    let responder = RefreshResponder::new().with_ckks(params.clone(), secret_copy(s)?);
    let ct = encrypt_at(s, &random_unit(params.slots()), level)?;
    let (mut mask, mut holder, mut unmask, mut dec, mut reenc) =
        (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..reps {
        let t = Instant::now();
        let (round, req) = RefreshRound::ckks("bench", params, pk, &[&ct], &policy, top)?;
        mask.push(ms(t.elapsed()));
        let t = Instant::now();
        let reply = responder.answer(&req)?;
        holder.push(ms(t.elapsed()));
        let t = Instant::now();
        let out = round.finish(&reply)?;
        unmask.push(ms(t.elapsed()));
        anyhow::ensure!(out.len() == 1 && out[0].level() == top, "bad refresh");
        // The key holder's two halves, on a masked ciphertext of its own.
        let (masked, mask) = CkksMask::apply(params, pk, &ct, &policy)?;
        let t = Instant::now();
        std::hint::black_box(Decryptor::new(&sk).decrypt(&masked)?);
        dec.push(ms(t.elapsed()));
        let t = Instant::now();
        std::hint::black_box(reencrypt(params, &sk, &masked, top, mask.target_scale())?);
        reenc.push(ms(t.elapsed()));
    }
    let (holder, dec, reenc) = (median(&mut holder), median(&mut dec), median(&mut reenc));
    Ok(TimeSplit {
        end_to_end_ms: f64::NAN,
        mask_ms: median(&mut mask),
        decrypt_ms: dec,
        encrypt_ms: reenc - dec,
        // Medians of separate runs: with few repetitions the difference can
        // dip below zero, which means "too small to measure".
        codec_ms: (holder - reenc).max(0.0),
        unmask_ms: median(&mut unmask),
        transfer: None,
    })
}

/// One preset's refresh figures.
struct RefreshRow {
    preset: Preset,
    from: usize,
    to: usize,
    loopback: TimeSplit,
    wan: TimeSplit,
    wan_method: String,
    /// Why a link's transfer could not be split, per link.
    unsplit: Vec<(&'static str, String)>,
    up: u64,
    down: u64,
    before_bits: f64,
    after_bits: f64,
    wan_after_bits: f64,
    fresh_bits: f64,
    fresh_pk_bits: f64,
}

/// [`refresh_jobs`] with the key holder connected through a relay shaped by
/// `method` (announced for the wide-area link), and how it shaped.
async fn jobs_through(
    emb: &Embedded,
    method: Method,
    s: &CkksSession,
    level: usize,
    reps: usize,
) -> anyhow::Result<(LinkFigures, String)> {
    let relay = netem::shaped_relay(emb.server.addr, Link::DEFAULT, method).await?;
    let how = format!(
        "{} shaping, delay in the {}",
        relay.method(),
        if relay.delay_in_kernel() {
            "kernel"
        } else {
            "relay"
        }
    );
    if method != Method::None {
        println!("  key holder on the wide-area link ({how})");
    }
    let client = Client::connect(
        &format!("https://localhost:{}", relay.addr().port()),
        &emb.token,
        emb.server.ca_pem.as_deref(),
    )
    .await?;
    let figures = refresh_jobs(&client, &relay, s, level, reps).await?;
    Ok((figures, how))
}

async fn refresh_preset(emb: &Embedded, preset: Preset, reps: usize) -> anyhow::Result<RefreshRow> {
    let client = emb.client().await?;
    let s = workload::ckks_setup_with(&client, preset, &[], true).await?;
    let policy = s.spec.refresh.map(|r| r.mask_policy()).unwrap_or_default();
    let top = s.params.max_level();
    let from = policy
        .lowest_level(&s.params, s.params.default_scale())
        .filter(|&l| l < top)
        .ok_or_else(|| anyhow::anyhow!("{}: no level to refresh from", preset.name()))?;
    let values = random_unit(s.params.slots());
    let before_bits = precision(&s, &encrypt_at(&s, &values, from)?, &values)?.bits();
    let fresh_bits = precision(&s, &encrypt_at(&s, &values, top)?, &values)?.bits();
    // The server re-randomizes with a public-key encryption of zero, so a
    // refreshed value carries that noise too: this is the figure to expect.
    let pt = Encoder::new(&s.params).encode_real(&values, top, s.params.default_scale())?;
    let fresh_pk_bits = precision(&s, &s.keys.encrypt(&pt)?, &values)?.bits();
    let split = tokio::task::block_in_place(|| split_in_process(&s, from, reps))?;

    // The pass-through relay is there to stamp the bytes as the shaping
    // relay does on the wide-area link, so that both figures are taken alike.
    println!("  key holder on loopback (through a pass-through relay)");
    let (lo, _) = jobs_through(emb, Method::None, &s, from, reps).await?;
    let (wan, wan_method) = jobs_through(emb, Method::Auto, &s, from, reps).await?;
    let unsplit = [("loopback", &lo.transfer), ("wan", &wan.transfer)]
        .into_iter()
        .filter_map(|(link, t)| t.as_ref().err().map(|why| (link, why.clone())))
        .collect();
    Ok(RefreshRow {
        preset,
        from,
        to: top,
        loopback: TimeSplit {
            end_to_end_ms: lo.end_to_end_ms,
            transfer: lo.transfer.ok(),
            ..split
        },
        wan: TimeSplit {
            end_to_end_ms: wan.end_to_end_ms,
            transfer: wan.transfer.ok(),
            ..split
        },
        wan_method,
        unsplit,
        up: lo.up,
        down: lo.down,
        before_bits,
        after_bits: lo.after_bits,
        wan_after_bits: wan.after_bits,
        fresh_bits,
        fresh_pk_bits,
    })
}

/// One run of the deep computation.
struct DeepRow {
    preset: Preset,
    exact: bool,
    refreshes: u64,
    total_ms: f64,
    up: u64,
    down: u64,
    report: PrecisionReport,
}

fn sin_half(x: f64) -> f64 {
    (std::f64::consts::PI * x).sin() / 2.0
}

async fn deep_preset(
    emb: &Embedded,
    preset: Preset,
    coeffs: &[f64],
) -> anyhow::Result<Vec<DeepRow>> {
    let client = emb.client().await?;
    let s = workload::ckks_setup_with(&client, preset, &[], true).await?;
    let policy = s.spec.refresh.map(|r| r.mask_policy()).unwrap_or_default();
    let top = s.params.max_level();
    let lowest = policy
        .lowest_level(&s.params, s.params.default_scale())
        .ok_or_else(|| anyhow::anyhow!("{}: no level to refresh at", preset.name()))?;
    let poly = ChebyshevPolynomial {
        coeffs: coeffs.to_vec(),
        a: -1.0,
        b: 1.0,
    };
    let responder = Arc::new(RefreshResponder::new().with_ckks(s.params.clone(), secret_copy(&s)?));
    let holder = client.serve_refreshes(responder.clone()).await?;
    let mut rows = vec![];
    for exact in [false, true] {
        let plan = deep_plan(top, lowest, poly.depth(), APPLICATIONS, exact).ok_or_else(|| {
            anyhow::anyhow!(
                "{}: {} levels cannot hold a depth-{} polynomial above refresh level {lowest}",
                preset.name(),
                top,
                poly.depth()
            )
        })?;
        let values = random_unit(s.params.slots());
        let before = responder.stats();
        let t = Instant::now();
        let ct = encrypt_at(&s, &values, top)?;
        let inputs = vec![
            workload::upload_object(&client, ObjectKind::CkksCiphertext, ct.to_bytes()).await?,
        ];
        let mut g = Graph::new();
        let mut x = g.input(0);
        for step in &plan {
            if let Some(level) = step {
                x = g.refresh(x, *level as u32);
            }
            x = g.chebyshev(x, coeffs.to_vec(), -1.0, 1.0);
        }
        let out = g.drop_for_decryption(x);
        g.output("y", out);
        let job = workload::run_job(
            &client,
            &JobSubmission {
                session: s.id,
                graph: g,
                inputs: inputs.clone(),
            },
        )
        .await?;
        let bytes = workload::output(&client, &job, "y").await?;
        let got = Encoder::new(&s.params).decode_real(
            &s.keys
                .decrypt(&Ciphertext::from_bytes(s.params.rlwe(), &bytes)?)?,
        )?;
        let total_ms = ms(t.elapsed());
        let after = responder.stats();
        let want: Vec<f64> = values
            .iter()
            .map(|&v| (0..APPLICATIONS).fold(v, |x, _| sin_half(x)))
            .collect();
        let planned = plan.iter().flatten().count() as u64;
        let refreshes = after.ciphertexts - before.ciphertexts;
        anyhow::ensure!(
            refreshes == planned,
            "{refreshes} refreshes, {planned} planned"
        );
        for id in inputs {
            let _ = client.delete(&id.to_hex()).await;
        }
        rows.push(DeepRow {
            preset,
            exact,
            refreshes,
            total_ms,
            up: after.bytes_in - before.bytes_in,
            down: after.bytes_out - before.bytes_out,
            report: report_real(&want, &got),
        });
    }
    drop(holder);
    Ok(rows)
}

fn ratio(ours: f64, peer: &Peer<f64>) -> f64 {
    peer.as_ref().map_or(f64::NAN, |p| ours / p)
}

fn fmt(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        "NA".into()
    }
}

fn met(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "met",
        Some(false) => "missed",
        None => "not measured (Lattigo skipped)",
    }
}

async fn bench(opts: &BenchOptions) -> anyhow::Result<()> {
    let (presets, deep_presets, reps, lattigo_logn, min_free): (&[Preset], &[Preset], _, u32, _) =
        if opts.quick {
            (&[Preset::N14], &[Preset::N15], 1, 14, QUICK_MIN_FREE_BYTES)
        } else {
            (
                &[Preset::N16, Preset::N15],
                &[Preset::N16, Preset::N15],
                3,
                16,
                lattigo_boot::MIN_FREE_BYTES,
            )
        };
    println!(
        "client-aided refresh vs Lattigo v6.2.0 bootstrapping on {}; ours: rayon pool of {} thread(s) shared by the server and the in-process key holder, Lattigo: GOMAXPROCS=1 (one thread); median of {reps} repetition(s)",
        cpu_name(),
        rayon::current_num_threads()
    );
    println!(
        "refresh against Lattigo's bootstrapping here; our own bootstrapping is `hecloud bench boot`"
    );

    // Lattigo first, alone: its N = 2^16 keys need most of the memory.
    let boot: Peer<BootFigures> = lattigo(
        &format!("bootstrapping at N = 2^{lattigo_logn}"),
        min_free,
        || lattigo_boot::boot(lattigo_logn, 1, 0, 1),
    );
    let deep: Peer<DeepFigures> = lattigo(
        &format!("deep computation at N = 2^{lattigo_logn}"),
        min_free,
        || lattigo_boot::deep(lattigo_logn, 1),
    );
    let boot_ms: Peer<f64> = boot.as_ref().map(|b| b.boot_ms).map_err(Clone::clone);
    let coeffs = match &deep {
        Ok(d) => d.chebyshev_coeffs.clone(),
        Err(_) => {
            println!(
                "Chebyshev coefficients: our own interpolant of sin(pi x)/2 at the {} Chebyshev nodes (Lattigo's did not run)",
                DEGREE + 1
            );
            ChebyshevPolynomial::interpolate(sin_half, DEGREE, -1.0, 1.0).coeffs
        }
    };

    let emb = Embedded::start(1, 4).await?;
    let mut rows = vec![];
    for &p in presets {
        println!("refresh at {} ...", p.name());
        rows.push(refresh_preset(&emb, p, reps).await?);
    }
    // Where the deep computation fails at N = 2^16 (memory, time), the next
    // preset runs it, and the reason is printed.
    let mut deep_rows = vec![];
    for &p in deep_presets {
        println!("deep computation at {} ...", p.name());
        match deep_preset(&emb, p, &coeffs).await {
            Ok(r) => {
                deep_rows = r;
                break;
            }
            Err(e) => println!("deep computation at {}: failed: {e:#}", p.name()),
        }
    }
    emb.server.stop().await?;

    let mut table = Table::new(
        "refresh",
        &[
            "who",
            "n",
            "link",
            "levels",
            "end_to_end_ms",
            "mask_ms",
            "decrypt_ms",
            "encrypt_ms",
            "codec_ms",
            "unmask_ms",
            "transfer_ms",
            "transfer_up_ms",
            "transfer_down_ms",
            "other_ms",
            "bytes_up",
            "bytes_down",
            "prec_before_bits",
            "prec_after_bits",
            "prec_fresh_bits",
            "prec_fresh_pk_bits",
            "ratio_to_lattigo",
        ],
    );
    for r in &rows {
        for (link, s, after) in [
            ("loopback", &r.loopback, r.after_bits),
            ("wan", &r.wan, r.wan_after_bits),
        ] {
            table.push(vec![
                "hecloud refresh".into(),
                r.preset.name().into(),
                link.into(),
                format!("{}->{}", r.from, r.to),
                fmt(s.end_to_end_ms, 1),
                fmt(s.mask_ms, 1),
                fmt(s.decrypt_ms, 1),
                fmt(s.encrypt_ms, 1),
                fmt(s.codec_ms, 1),
                fmt(s.unmask_ms, 1),
                fmt(s.transfer_ms(), 1),
                fmt(s.transfer.map_or(f64::NAN, |t| t.up_ms), 1),
                fmt(s.transfer.map_or(f64::NAN, |t| t.down_ms), 1),
                fmt(s.other_ms(), 1),
                r.up.to_string(),
                r.down.to_string(),
                fmt(r.before_bits, 1),
                fmt(after, 1),
                fmt(r.fresh_bits, 1),
                fmt(r.fresh_pk_bits, 1),
                fmt(ratio(s.end_to_end_ms, &boot_ms), 4),
            ]);
        }
    }
    if let Ok(b) = &boot {
        table.push(vec![
            "lattigo bootstrap".into(),
            format!("n{}", b.logn),
            "in-process".into(),
            format!("0->{}", b.levels_left),
            fmt(b.boot_ms, 1),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            fmt(b.precision_min_bits, 1),
            String::new(),
            String::new(),
            "1".into(),
        ]);
    }
    print!("\n{}", table.render());
    println!(
        "up/down from the key holder's side: bytes_up and transfer_up: to the key holder (masked request); bytes_down and transfer_down: back to the server (seeded fresh encryption); transfer_up/down measured, not derived from the link's rates: the relay stamps the bytes at the server's side and the key holder's callback stamps its start and end (up: first request byte leaving the server → callback start; down: callback end → last reply byte reaching the server), on loopback through an unshaped pass-through relay (one user-space copy each way, in end_to_end too), on the wide-area link through the shaping relay; transfer = up + down; other = end to end − (mask + decrypt + encrypt + codec + unmask + transfer): the server's gRPC encoding and decoding and its scheduling, negative where the in-process figures overshoot; precision: −log2 of the largest slot error (fresh: secret-key encryption at the top level, as the client and the key holder encrypt; fresh_pk: public-key encryption, whose noise the server's re-randomization adds); output dropped to the checked decoding level after the refresh only for the download"
    );
    for r in &rows {
        println!(
            "{} wide-area link: {} ({})",
            r.preset.name(),
            Link::DEFAULT,
            r.wan_method
        );
        for (link, why) in &r.unsplit {
            println!(
                "{} {link}: transfer not split by direction ({why}): transfer_ms is end to end − the measured work, both directions together",
                r.preset.name()
            );
        }
    }
    if let Ok(b) = &boot {
        println!(
            "Lattigo bootstrapping: keygen {:.1} s, {} of keys, precision mean {:.1} / min {:.1} bits, peak RSS {}",
            b.keygen_ms / 1e3,
            bytes(b.key_bytes),
            b.precision_mean_bits,
            b.precision_min_bits,
            bytes(b.peak_rss_bytes)
        );
    }

    let mut dtable = Table::new(
        "refresh_deep",
        &[
            "who",
            "n",
            "refresh_to",
            "refreshes",
            "total_ms",
            "bytes_up",
            "bytes_down",
            "prec_min_bits",
            "prec_mean_bits",
            "ratio_to_lattigo",
        ],
    );
    let lattigo_deep_ms: Peer<f64> = deep.as_ref().map(|d| d.total_ms).map_err(Clone::clone);
    for d in &deep_rows {
        dtable.push(vec![
            "hecloud refresh".into(),
            d.preset.name().into(),
            if d.exact { "exact depth" } else { "top" }.into(),
            d.refreshes.to_string(),
            fmt(d.total_ms, 0),
            d.up.to_string(),
            d.down.to_string(),
            fmt(d.report.bits(), 1),
            fmt(-d.report.log2_mean_err, 1),
            fmt(ratio(d.total_ms, &lattigo_deep_ms), 3),
        ]);
    }
    if let Ok(d) = &deep {
        dtable.push(vec![
            "lattigo bootstrap".into(),
            format!("n{}", d.logn),
            "bootstrap".into(),
            d.boots.to_string(),
            fmt(d.total_ms, 0),
            String::new(),
            String::new(),
            fmt(d.precision_min_bits, 1),
            fmt(d.precision_mean_bits, 1),
            "1".into(),
        ]);
    }
    print!("\n{}", dtable.render());
    println!(
        "deep: degree-{DEGREE} Chebyshev approximation of sin(pi x)/2 on [-1, 1] applied {APPLICATIONS} times to full-slot inputs, precision against float64 f∘f∘f∘f; ours: client encrypt → upload → job (key holder on loopback) → download → decrypt, key generation excluded{}",
        match &deep {
            Ok(d) => format!(
                "; Lattigo: {} bootstrappings ({:.0} ms) + polynomials ({:.0} ms), key generation excluded",
                d.boots, d.boot_ms_total, d.eval_ms_total
            ),
            Err(why) => format!("; Lattigo skipped: {why}"),
        }
    );
    let p1 = table.write_csv(&opts.out_dir)?;
    let p2 = dtable.write_csv(&opts.out_dir)?;
    println!("wrote {} and {}", p1.display(), p2.display());

    let head = &rows[0];
    let ratio_boot = ratio(head.loopback.end_to_end_ms, &boot_ms);
    let wan_ratio_boot = ratio(head.wan.end_to_end_ms, &boot_ms);
    let ok_boot = boot_ms
        .is_ok()
        .then_some(ratio_boot <= 1.0 / LOOPBACK_FACTOR);
    let ok_wan = boot_ms
        .is_ok()
        .then_some(wan_ratio_boot <= 1.0 / WAN_FACTOR);
    let ok_prec = head.after_bits >= head.fresh_bits - PRECISION_SLACK_BITS;
    println!(
        "target ({}): loopback refresh ≤ 1/{LOOPBACK_FACTOR} of a bootstrapping: {} (ratio {})",
        head.preset.name(),
        met(ok_boot),
        fmt(ratio_boot, 4)
    );
    println!(
        "target ({}): wide-area refresh ≤ 1/{WAN_FACTOR} of a bootstrapping: {} (ratio {})",
        head.preset.name(),
        met(ok_wan),
        fmt(wan_ratio_boot, 4)
    );
    println!(
        "target ({}): precision after refresh within {PRECISION_SLACK_BITS} bit of a fresh encryption: {} ({:.1} vs {:.1} bits)",
        head.preset.name(),
        met(Some(ok_prec)),
        head.after_bits,
        head.fresh_bits
    );
    let deep_top = deep_rows.iter().find(|d| !d.exact);
    let deep_ms = deep_top.map_or(f64::NAN, |d| d.total_ms);
    let mut r = ResultLine::new("refresh");
    r.push_f64("refresh_ms", head.loopback.end_to_end_ms, 1);
    r.push_f64("wan_refresh_ms", head.wan.end_to_end_ms, 1);
    r.push("bytes_up", head.up);
    r.push("bytes_down", head.down);
    r.push_f64("lattigo_boot_ms", *boot_ms.as_ref().unwrap_or(&f64::NAN), 1);
    r.push_f64("ratio_boot", ratio_boot, 4);
    r.push_f64("wan_ratio_boot", wan_ratio_boot, 4);
    r.push_f64("precision_bits", head.after_bits, 1);
    r.push_f64("deep_ms", deep_ms, 0);
    r.push_f64(
        "lattigo_deep_ms",
        *lattigo_deep_ms.as_ref().unwrap_or(&f64::NAN),
        0,
    );
    r.push_f64("ratio_deep", ratio(deep_ms, &lattigo_deep_ms), 3);
    r.push("n", head.preset.name());
    r.push("deep_n", deep_top.map_or("failed", |d| d.preset.name()));
    println!("{r}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_is_what_the_measured_work_leaves() {
        let s = TimeSplit {
            end_to_end_ms: 50.0,
            mask_ms: 10.0,
            decrypt_ms: 10.0,
            encrypt_ms: 20.0,
            codec_ms: 5.0,
            unmask_ms: 10.0,
            transfer: None,
        };
        assert_eq!(s.transfer_ms(), -5.0);
        assert_eq!(s.other_ms(), 0.0);
    }

    #[test]
    fn measured_transfer_is_the_sum_of_its_directions() {
        let s = TimeSplit {
            end_to_end_ms: 100.0,
            mask_ms: 10.0,
            decrypt_ms: 10.0,
            encrypt_ms: 20.0,
            codec_ms: 5.0,
            unmask_ms: 10.0,
            transfer: Some(Transfer {
                up_ms: 30.0,
                down_ms: 20.0,
            }),
        };
        assert_eq!(s.transfer_ms(), 50.0);
        assert_eq!(s.other_ms(), -5.0);
    }

    #[test]
    fn transfer_directions_from_the_relay_and_the_callback() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let chunk = |ms, bytes| netem::Chunk { at: at(ms), bytes };
        // The request leaves the server at 1..3 ms, the callback runs from
        // 13 to 20 ms, the reply reaches the server at 30..35 ms; a small
        // message each way around them.
        let traffic = netem::Traffic {
            from_target: vec![chunk(0, 40), chunk(1, 500), chunk(3, 500), chunk(40, 90)],
            to_target: vec![chunk(2, 30), chunk(30, 300), chunk(35, 100), chunk(50, 60)],
        };
        let t = transfer_of(&traffic, Some((at(13), at(20))), 1000, 400).unwrap();
        assert_eq!(
            t,
            Transfer {
                up_ms: 12.0,
                down_ms: 15.0
            }
        );
        assert!(transfer_of(&traffic, None, 1000, 400).is_err());
        // More bytes than the relay saw: no split.
        let e = transfer_of(&traffic, Some((at(13), at(20))), 1041, 400).unwrap_err();
        assert!(e.contains("1041"), "{e}");
        assert!(transfer_of(&traffic, Some((at(13), at(20))), 1000, 461).is_err());
    }

    #[test]
    fn deep_plans_refresh_only_when_depth_is_missing() {
        // N = 2^15: 13 levels, refreshes from level 2.
        assert_eq!(
            deep_plan(13, 2, 7, 4, false),
            Some(vec![None, Some(13), Some(13), Some(13)])
        );
        assert_eq!(
            deep_plan(13, 2, 7, 4, true),
            Some(vec![None, Some(9), Some(9), Some(7)])
        );
        // N = 2^14: 6 levels cannot hold depth 7.
        assert_eq!(deep_plan(6, 2, 7, 4, false), None);
        // One application needs no refresh at all.
        assert_eq!(deep_plan(7, 2, 7, 1, true), Some(vec![None]));
    }

    #[test]
    fn median_of_odd_and_empty() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert!(median(&mut []).is_nan());
    }
}
