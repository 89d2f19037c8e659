//! The job manager: a bounded pool of worker threads fed round robin
//! between tenants, per-tenant limits on jobs in flight and on their
//! estimated cost, a budget of checking time per tenant, progress events,
//! durable cancellation, and recovery of jobs interrupted by a restart.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use hecloud_protocol::{JobId, JobState};
use tokio::sync::broadcast;

use crate::config::Quota;
use crate::error::{Result, ServerError};
use crate::exec::{Executors, JobContext, JobError, TenantObjects, UploadWatcher};
use crate::hub::SessionHub;
use crate::store::{Completion, JobRecord, ReadyOutput, Store};
use hecloud_protocol::refresh::CALLBACK_REFRESH;

/// A change to a job (tenant, job id): watchers re-read the job.
pub type JobEvent = (String, JobId);

/// A job: (tenant, job id).
type JobKey = (String, JobId);

/// Queued jobs, served round robin between tenants: a tenant with many
/// long jobs queued delays another tenant's next job by at most the jobs
/// already running, not by its whole queue.
#[derive(Debug, Default)]
struct FairQueue {
    state: Mutex<QueueState>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct QueueState {
    /// Each tenant's queued jobs, oldest first.
    jobs: HashMap<String, VecDeque<JobId>>,
    /// Tenants with queued jobs, in the order they are served.
    turns: VecDeque<String>,
    closed: bool,
}

impl FairQueue {
    /// Queues a job; false once the queue is closed.
    fn push(&self, tenant: &str, id: JobId) -> bool {
        let mut q = self.state.lock().unwrap();
        if q.closed {
            return false;
        }
        let jobs = q.jobs.entry(tenant.to_string()).or_default();
        jobs.push_back(id);
        if jobs.len() == 1 {
            q.turns.push_back(tenant.to_string());
        }
        self.wake.notify_one();
        true
    }

    /// The next job: the oldest of the tenant whose turn it is. Blocks
    /// until there is one; `None` once the queue is closed.
    fn pop(&self) -> Option<JobKey> {
        let mut q = self.state.lock().unwrap();
        loop {
            if q.closed {
                return None;
            }
            if let Some(tenant) = q.turns.pop_front() {
                let jobs = q.jobs.get_mut(&tenant).expect("a tenant in turn has jobs");
                let id = jobs.pop_front().expect("a tenant in turn has jobs");
                if jobs.is_empty() {
                    q.jobs.remove(&tenant);
                } else {
                    q.turns.push_back(tenant.clone());
                }
                return Some((tenant, id));
            }
            q = self.wake.wait(q).unwrap();
        }
    }

    /// Stops serving: workers waiting get `None`; queued jobs stay queued
    /// in the store (a restart resumes them).
    fn close(&self) {
        self.state.lock().unwrap().closed = true;
        self.wake.notify_all();
    }
}

/// Seconds of checking each tenant may still use, refilled over time (a
/// token bucket), and its checks running now.
#[derive(Debug, Default)]
struct CheckBudgets(Mutex<HashMap<String, CheckBudget>>);

#[derive(Debug)]
struct CheckBudget {
    seconds: f64,
    at: Instant,
    running: u32,
}

/// A check under way, charged to its tenant when dropped.
#[derive(Debug)]
struct Checking<'a> {
    budgets: &'a CheckBudgets,
    tenant: &'a str,
    rate: f64,
    cap: f64,
    cpu_at_start: Duration,
}

impl CheckBudgets {
    /// Lets a check of `tenant` start if its budget is not spent and it
    /// has fewer than `max_running` checks running.
    fn enter<'a>(
        &'a self,
        tenant: &'a str,
        quota: &Quota,
        max_running: u32,
    ) -> Result<Checking<'a>> {
        let rate = quota.check_seconds_per_minute / 60.0;
        let cap = 2.0 * quota.check_seconds_per_minute;
        let mut all = self.0.lock().unwrap();
        let b = all.entry(tenant.to_string()).or_insert(CheckBudget {
            seconds: cap,
            at: Instant::now(),
            running: 0,
        });
        b.seconds = (b.seconds + b.at.elapsed().as_secs_f64() * rate).min(cap);
        b.at = Instant::now();
        if b.seconds <= 0.0 {
            return Err(ServerError::Quota(format!(
                "checking this tenant's submissions used its {} s per minute: retry in {:.0} s",
                quota.check_seconds_per_minute,
                (-b.seconds / rate).ceil().max(1.0)
            )));
        }
        if b.running >= max_running {
            return Err(ServerError::Quota(format!(
                "{} jobs queued, running or being checked at most",
                quota.max_concurrent_jobs
            )));
        }
        b.running += 1;
        Ok(Checking {
            budgets: self,
            tenant,
            rate,
            cap,
            cpu_at_start: thread_cpu_time(),
        })
    }
}

impl Drop for Checking<'_> {
    fn drop(&mut self) {
        let spent = thread_cpu_time().saturating_sub(self.cpu_at_start);
        let mut all = self.budgets.0.lock().unwrap();
        if let Some(b) = all.get_mut(self.tenant) {
            b.running -= 1;
            b.seconds = (b.seconds + b.at.elapsed().as_secs_f64() * self.rate).min(self.cap)
                - spent.as_secs_f64();
            b.at = Instant::now();
        }
    }
}

/// CPU time of the calling thread: what a check costs the server, not the
/// time it spent waiting for inputs still being uploaded.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0;
    if ok {
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    } else {
        Duration::ZERO
    }
}

/// The job manager.
pub struct Jobs {
    store: Arc<Store>,
    executors: Executors,
    hub: Arc<SessionHub>,
    queue: FairQueue,
    cancels: Mutex<HashMap<JobKey, Arc<AtomicBool>>>,
    events: broadcast::Sender<JobEvent>,
    quota: Quota,
    checks: CheckBudgets,
    admit: Mutex<()>,
    /// Outputs of jobs being stored, by (tenant, job id): watchers send them
    /// meanwhile (the job succeeds once they are stored).
    ready: Mutex<HashMap<JobKey, Arc<[ReadyOutput]>>>,
}

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jobs")
            .field("kinds", &self.executors.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Jobs {
    /// Starts `workers` worker threads and re-queues (or fails, after
    /// `max_attempts` starts; or ends as cancelled, if a cancel was asked
    /// for) the jobs a previous run left unfinished.
    pub fn start(
        store: Arc<Store>,
        executors: Executors,
        hub: Arc<SessionHub>,
        workers: usize,
        quota: Quota,
        max_attempts: u32,
        runtime: tokio::runtime::Handle,
    ) -> Result<Arc<Self>> {
        let (events, _) = broadcast::channel(1024);
        let jobs = Arc::new(Self {
            store,
            executors,
            hub,
            queue: FairQueue::default(),
            cancels: Mutex::new(HashMap::new()),
            events,
            quota,
            checks: CheckBudgets::default(),
            admit: Mutex::new(()),
            ready: Mutex::default(),
        });
        for rec in jobs.store.unfinished_jobs()? {
            let (tenant, id, attempts) = (&rec.tenant, rec.id, rec.attempts);
            if rec.cancel_requested {
                tracing::info!(%tenant, job = %id, "job cancelled before the restart");
                jobs.store
                    .end_job(tenant, id, JobState::Cancelled, "cancelled by the client")?;
            } else if rec.state == JobState::Running && attempts >= max_attempts {
                tracing::warn!(%tenant, job = %id, attempts, "job interrupted too often; failing it");
                jobs.store.end_job(
                    tenant,
                    id,
                    JobState::Failed,
                    &format!("interrupted by server restarts {attempts} times"),
                )?;
            } else {
                tracing::info!(%tenant, job = %id, state = ?rec.state, "resuming job after restart");
                jobs.queue.push(tenant, id);
            }
        }
        for w in 0..workers {
            let jobs = jobs.clone();
            let rt = runtime.clone();
            std::thread::Builder::new()
                .name(format!("hecloud-worker-{w}"))
                .spawn(move || {
                    while let Some((tenant, id)) = jobs.queue.pop() {
                        jobs.run_one(&tenant, id, &rt);
                    }
                })?;
        }
        Ok(jobs)
    }

    /// Stops taking jobs: running jobs are cancelled at their next step
    /// (they stay unfinished in the store and run again after a restart),
    /// queued ones stay queued; workers then exit.
    pub fn shutdown(&self) {
        self.queue.close();
        for c in self.cancels.lock().unwrap().values() {
            c.store(true, Ordering::Relaxed);
        }
    }

    /// Job kinds served.
    pub fn kinds(&self) -> Vec<String> {
        let mut k: Vec<_> = self.executors.keys().cloned().collect();
        k.sort();
        k
    }

    /// Watchers of the executors that want to see the bytes of an upload of
    /// `kind` and `size` bytes that `tenant` is starting (see
    /// [`crate::exec::Executor::watch_upload`]).
    pub fn watch_upload(&self, tenant: &str, kind: &str, size: u64) -> Vec<Box<dyn UploadWatcher>> {
        self.executors
            .values()
            .filter_map(|e| e.watch_upload(tenant, kind, size))
            .collect()
    }

    /// Job inputs that executors took already decoded from their uploads.
    pub fn inputs_decoded_on_upload(&self) -> u64 {
        self.executors
            .values()
            .map(|e| e.inputs_decoded_on_upload())
            .sum()
    }

    /// The outputs of a job that has computed them and is storing them.
    pub fn ready_outputs(&self, tenant: &str, id: JobId) -> Option<Arc<[ReadyOutput]>> {
        self.ready
            .lock()
            .unwrap()
            .get(&(tenant.to_string(), id))
            .cloned()
    }

    /// Subscribes to job events.
    pub fn subscribe(&self) -> broadcast::Receiver<JobEvent> {
        self.events.subscribe()
    }

    fn notify(&self, tenant: &str, id: JobId) {
        let _ = self.events.send((tenant.into(), id));
    }

    /// Checks and queues a job (blocking: may load keys and inputs). An
    /// input not found is waited for up to `await_inputs`: one its client
    /// is still uploading (see [`crate::arrivals`]).
    ///
    /// Refused with RESOURCE_EXHAUSTED: a job estimated to cost more than
    /// the tenant's `max_job_seconds` (the executor stops costing it as soon
    /// as it knows), one that would take the tenant's jobs in flight past
    /// `max_inflight_seconds` or `max_concurrent_jobs`, and any submission
    /// once the tenant's checking budget is spent.
    pub fn submit(
        &self,
        tenant: &str,
        kind: &str,
        spec: &[u8],
        client_ref: &str,
        await_inputs: Duration,
    ) -> Result<JobRecord> {
        let exec = self.executors.get(kind).ok_or_else(|| {
            ServerError::InvalidArgument(format!(
                "unknown job kind `{kind}` (known: {})",
                self.kinds().join(", ")
            ))
        })?;
        // A resubmission (same client_ref) returns the job it made.
        if let Some(rec) = self.store.job_by_ref(tenant, kind, spec, client_ref)? {
            return Ok(rec);
        }
        let max_concurrent = self.quota.max_concurrent_jobs;
        let (active, _) = self.store.active_jobs(tenant)?;
        if active >= u64::from(max_concurrent) {
            return Err(ServerError::Quota(format!(
                "{max_concurrent} jobs queued or running at most"
            )));
        }
        let est_seconds = {
            let _checking = self.checks.enter(
                tenant,
                &self.quota,
                max_concurrent.saturating_sub(active as u32),
            )?;
            let objects = TenantObjects::new(self.store.clone(), tenant)
                .awaiting(await_inputs)
                .with_key_holder(self.hub.serves(tenant, CALLBACK_REFRESH));
            exec.check(spec, &objects, self.quota.max_job_seconds)
                .map_err(|e| match e {
                    JobError::Invalid(m) => ServerError::InvalidArgument(m),
                    JobError::OverLimit(m) => ServerError::Quota(m),
                    JobError::Damaged(m) => ServerError::Damaged(m),
                    JobError::Failed(m) => ServerError::Internal(m),
                    JobError::Cancelled => ServerError::Internal("cancelled during check".into()),
                })?
        };
        let rec = {
            let _g = self.admit.lock().unwrap();
            let (active, in_flight) = self.store.active_jobs(tenant)?;
            if active >= u64::from(max_concurrent) {
                return Err(ServerError::Quota(format!(
                    "{active} jobs queued or running (limit {max_concurrent})"
                )));
            }
            let max = self.quota.max_inflight_seconds;
            if in_flight + est_seconds > max {
                return Err(ServerError::Quota(format!(
                    "the job's estimated {est_seconds:.1} s with the {in_flight:.1} s of jobs in flight would exceed the limit of {max} s"
                )));
            }
            let (rec, new) = self
                .store
                .insert_job(tenant, kind, spec, client_ref, est_seconds)?;
            if !new {
                return Ok(rec);
            }
            rec
        };
        tracing::info!(%tenant, job = %rec.id, %kind, spec_bytes = spec.len(), est_seconds, "job queued");
        if !self.queue.push(tenant, rec.id) {
            // Queued in the store: a restart runs it.
            return Err(ServerError::Precondition("server is shutting down".into()));
        }
        // The job may start meanwhile; it is acknowledged once durable.
        self.store.sync_metadata()?;
        Ok(rec)
    }

    /// Cancels a job. The cancel is durable before it is answered: a queued
    /// job is cancelled at once, a running one stops at its next step (a
    /// layer of a circuit, a graph node) and ends CANCELLED, its outputs
    /// dropped even if they were ready; a restart does not run it again.
    pub fn cancel(&self, tenant: &str, id: JobId) -> Result<JobRecord> {
        let rec = self
            .store
            .job(tenant, id)?
            .ok_or_else(|| ServerError::NotFound(format!("job {id} not found")))?;
        if !rec.state.is_final() {
            self.store.request_cancel(tenant, id)?;
            if let Some(c) = self.cancels.lock().unwrap().get(&(tenant.to_string(), id)) {
                c.store(true, Ordering::Relaxed);
            }
            tracing::info!(%tenant, job = %id, "job cancel requested");
            self.notify(tenant, id);
        }
        Ok(self.store.job(tenant, id)?.expect("job exists"))
    }

    fn run_one(&self, tenant: &str, id: JobId, rt: &tokio::runtime::Handle) {
        let rec = match self.store.job(tenant, id) {
            Ok(Some(r)) => r,
            _ => return,
        };
        let cancel = Arc::new(AtomicBool::new(false));
        let key = (tenant.to_string(), id);
        self.cancels
            .lock()
            .unwrap()
            .insert(key.clone(), cancel.clone());
        match self.store.start_job(tenant, id) {
            Ok(true) => {}
            _ => {
                self.cancels.lock().unwrap().remove(&key);
                return;
            }
        }
        self.notify(tenant, id);
        tracing::info!(%tenant, job = %id, kind = %rec.kind, "job started");
        let t0 = Instant::now();
        let objects = TenantObjects::new(self.store.clone(), tenant)
            .with_key_holder(self.hub.serves(tenant, CALLBACK_REFRESH));
        let mut last = Instant::now() - Duration::from_secs(1);
        let mut progress = |f: f32, msg: &str| {
            // Node reports are throttled; the start of a phase (loading,
            // running: reported at 0) and the end always get through.
            if last.elapsed() >= Duration::from_millis(100) || f <= 0.0 || f >= 1.0 {
                last = Instant::now();
                let _ = self.store.set_progress(tenant, id, f.clamp(0.0, 1.0), msg);
                self.notify(tenant, id);
            }
        };
        let result = match self.executors.get(&rec.kind) {
            Some(exec) => {
                let exec = exec.clone();
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    exec.run(
                        &rec.spec,
                        JobContext {
                            job_id: id,
                            objects: &objects,
                            progress: &mut progress,
                            cancel: &cancel,
                            hub: &self.hub,
                            runtime: rt,
                        },
                    )
                }))
                .unwrap_or_else(|_| Err(JobError::Failed("the executor panicked".into())))
                // Inputs read while they were being stored must be stored
                // before the job can succeed.
                .and_then(|out| objects.settle().map(|()| out))
            }
            None => Err(JobError::Invalid(format!(
                "unknown job kind `{}`",
                rec.kind
            ))),
        };
        let stored = match result {
            Ok(out) => {
                let n = out.outputs.len();
                let ready: Arc<[ReadyOutput]> = out
                    .outputs
                    .into_iter()
                    .map(|(name, kind, bytes)| ReadyOutput::new(name, kind, bytes))
                    .collect();
                // Watchers send them while they are stored.
                self.ready
                    .lock()
                    .unwrap()
                    .insert(key.clone(), ready.clone());
                self.notify(tenant, id);
                let r = self.store.complete_job(
                    tenant,
                    id,
                    &ready,
                    out.compute.as_micros() as u64,
                    &self.quota,
                );
                self.ready.lock().unwrap().remove(&key);
                match r {
                    Ok(Completion::Stored) => {
                        tracing::info!(%tenant, job = %id, outputs = n, compute_ms = out.compute.as_millis() as u64,
                            total_ms = t0.elapsed().as_millis() as u64, "job succeeded");
                        Ok(())
                    }
                    // Cancelled while its outputs were made: they are dropped.
                    Ok(Completion::NotRunning) => {
                        tracing::info!(%tenant, job = %id, "job cancelled; its outputs dropped");
                        self.store.end_job(
                            tenant,
                            id,
                            JobState::Cancelled,
                            "cancelled by the client",
                        )
                    }
                    Ok(Completion::OverQuota(why)) => {
                        tracing::warn!(%tenant, job = %id, reason = %why, "job failed");
                        Ok(())
                    }
                    // Not left running: the job fails, saying why when the
                    // reason is the tenant's (an output already stored as
                    // another kind), not the server's.
                    Err(e) => {
                        tracing::error!(%tenant, job = %id, error = %e, "job outputs not stored");
                        let why = match e {
                            ServerError::AlreadyExists(m) => m,
                            _ => "its outputs could not be stored (server error)".into(),
                        };
                        self.store.end_job(tenant, id, JobState::Failed, &why)
                    }
                }
            }
            Err(JobError::Cancelled) => {
                tracing::info!(%tenant, job = %id, "job cancelled");
                self.store
                    .end_job(tenant, id, JobState::Cancelled, "cancelled by the client")
            }
            Err(
                JobError::Invalid(m)
                | JobError::Failed(m)
                | JobError::OverLimit(m)
                | JobError::Damaged(m),
            ) => {
                tracing::warn!(%tenant, job = %id, reason = %m, "job failed");
                self.store.end_job(tenant, id, JobState::Failed, &m)
            }
        };
        if let Err(e) = stored {
            tracing::error!(%tenant, job = %id, error = %e, "could not record the job's end");
        }
        self.cancels.lock().unwrap().remove(&key);
        self.notify(tenant, id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_serves_tenants_in_turn() {
        let q = FairQueue::default();
        let job = |tag: u8, i: u8| JobId([tag, i, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let busy = |i| job(b'b', i);
        let quiet = |i| job(b'q', i);
        for i in 0..4 {
            assert!(q.push("busy", busy(i)));
        }
        assert!(q.push("quiet", quiet(0)));
        assert_eq!(q.pop().unwrap(), ("busy".into(), busy(0)));
        // Queued after four of busy's jobs, served after one.
        assert_eq!(q.pop().unwrap(), ("quiet".into(), quiet(0)));
        assert!(q.push("quiet", quiet(1)));
        let rest: Vec<JobId> = (0..4).map(|_| q.pop().unwrap().1).collect();
        assert_eq!(rest, [busy(1), quiet(1), busy(2), busy(3)]);
        // Closed: a waiting worker is released, nothing more is taken.
        let q = Arc::new(q);
        let waiting = {
            let q = q.clone();
            std::thread::spawn(move || q.pop())
        };
        q.close();
        assert_eq!(waiting.join().unwrap(), None);
        assert!(!q.push("quiet", job(b'l', 0)));
    }

    #[test]
    fn checking_time_is_charged_to_its_tenant() {
        let budgets = CheckBudgets::default();
        let quota = Quota {
            check_seconds_per_minute: 0.06,
            ..Quota::default()
        };
        // Twice the rate per minute as a burst: 0.12 s of CPU.
        {
            let _c = budgets.enter("greedy", &quota, 4).unwrap();
            let t = thread_cpu_time();
            while thread_cpu_time() - t < Duration::from_millis(150) {
                std::hint::black_box(0u64);
            }
        }
        let e = budgets.enter("greedy", &quota, 4).unwrap_err();
        assert!(
            matches!(&e, ServerError::Quota(m) if m.contains("retry in")),
            "{e:?}"
        );
        // Another tenant's budget is its own.
        drop(budgets.enter("other", &quota, 4).unwrap());
        // Checks running at once are bounded too.
        let a = budgets.enter("other", &quota, 1).unwrap();
        assert!(budgets.enter("other", &quota, 1).is_err());
        drop(a);
        assert!(budgets.enter("other", &quota, 1).is_ok());
    }
}
