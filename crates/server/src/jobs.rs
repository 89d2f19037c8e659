//! The job manager: a bounded pool of worker threads, per-tenant limits on
//! jobs in flight, progress events, cancellation, and recovery of jobs
//! interrupted by a restart.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use crate::error::{Result, ServerError};
use crate::exec::{Executors, JobContext, JobError, TenantObjects, UploadWatcher};
use crate::hub::SessionHub;
use crate::store::{JobRecord, JobState, ReadyOutput, Store};

/// A change to a job (tenant, job id): watchers re-read the job.
pub type JobEvent = (String, String);

/// A job: (tenant, job id).
type JobKey = (String, String);

/// The job manager.
pub struct Jobs {
    store: Arc<Store>,
    executors: Executors,
    hub: Arc<SessionHub>,
    queue: Mutex<Option<mpsc::Sender<(String, String)>>>,
    cancels: Mutex<HashMap<(String, String), Arc<AtomicBool>>>,
    events: broadcast::Sender<JobEvent>,
    max_concurrent: u32,
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
    /// `max_attempts` starts) the jobs a previous run left unfinished.
    pub fn start(
        store: Arc<Store>,
        executors: Executors,
        hub: Arc<SessionHub>,
        workers: usize,
        max_concurrent: u32,
        max_attempts: u32,
        runtime: tokio::runtime::Handle,
    ) -> Result<Arc<Self>> {
        let (tx, rx) = mpsc::channel::<(String, String)>();
        let (events, _) = broadcast::channel(1024);
        let jobs = Arc::new(Self {
            store,
            executors,
            hub,
            queue: Mutex::new(Some(tx.clone())),
            cancels: Mutex::new(HashMap::new()),
            events,
            max_concurrent,
            admit: Mutex::new(()),
            ready: Mutex::default(),
        });
        for (tenant, id, state, attempts) in jobs.store.unfinished_jobs()? {
            if state == JobState::Running && attempts >= max_attempts {
                tracing::warn!(%tenant, job = %id, attempts, "job interrupted too often; failing it");
                jobs.store.end_job(
                    &tenant,
                    &id,
                    JobState::Failed,
                    &format!("interrupted by server restarts {attempts} times"),
                )?;
            } else {
                tracing::info!(%tenant, job = %id, ?state, "resuming job after restart");
                let _ = tx.send((tenant, id));
            }
        }
        let rx = Arc::new(Mutex::new(rx));
        for w in 0..workers {
            let jobs = jobs.clone();
            let rx = rx.clone();
            let rt = runtime.clone();
            std::thread::Builder::new()
                .name(format!("hecloud-worker-{w}"))
                .spawn(move || {
                    loop {
                        let next = rx.lock().unwrap().recv();
                        let Ok((tenant, id)) = next else { break };
                        jobs.run_one(&tenant, &id, &rt);
                    }
                })?;
        }
        Ok(jobs)
    }

    /// Stops taking jobs (workers finish the one they run, then exit).
    pub fn shutdown(&self) {
        self.queue.lock().unwrap().take();
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
    pub fn ready_outputs(&self, tenant: &str, id: &str) -> Option<Arc<[ReadyOutput]>> {
        self.ready
            .lock()
            .unwrap()
            .get(&(tenant.to_string(), id.to_string()))
            .cloned()
    }

    /// Subscribes to job events.
    pub fn subscribe(&self) -> broadcast::Receiver<JobEvent> {
        self.events.subscribe()
    }

    fn notify(&self, tenant: &str, id: &str) {
        let _ = self.events.send((tenant.into(), id.into()));
    }

    /// Checks and queues a job (blocking: may load keys and inputs). An
    /// input not found is waited for up to `await_inputs`: one its client
    /// is still uploading (see [`crate::arrivals`]).
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
        if let Some(rec) = self.store.job_by_ref(tenant, client_ref)? {
            return Ok(rec);
        }
        if self.store.count_active_jobs(tenant)? >= u64::from(self.max_concurrent) {
            return Err(ServerError::Quota(format!(
                "{} jobs queued or running at most",
                self.max_concurrent
            )));
        }
        let objects = TenantObjects::new(self.store.clone(), tenant).awaiting(await_inputs);
        exec.check(spec, &objects).map_err(|e| match e {
            JobError::Invalid(m) => ServerError::InvalidArgument(m),
            JobError::Failed(m) => ServerError::Internal(m),
            JobError::Cancelled => ServerError::Internal("cancelled during check".into()),
        })?;
        let rec = {
            let _g = self.admit.lock().unwrap();
            let active = self.store.count_active_jobs(tenant)?;
            if active >= u64::from(self.max_concurrent) {
                return Err(ServerError::Quota(format!(
                    "{active} jobs queued or running (limit {})",
                    self.max_concurrent
                )));
            }
            let (rec, new) = self.store.insert_job(tenant, kind, spec, client_ref)?;
            if !new {
                return Ok(rec);
            }
            rec
        };
        tracing::info!(%tenant, job = %rec.id, %kind, spec_bytes = spec.len(), "job queued");
        let q = self.queue.lock().unwrap();
        let tx = q
            .as_ref()
            .ok_or_else(|| ServerError::Precondition("server is shutting down".into()))?;
        tx.send((tenant.into(), rec.id.clone()))
            .map_err(|_| ServerError::Precondition("server is shutting down".into()))?;
        drop(q);
        // The job may start meanwhile; it is acknowledged once durable.
        self.store.sync_metadata()?;
        Ok(rec)
    }

    /// Cancels a job: a queued job is cancelled at once, a running one at its
    /// next step.
    pub fn cancel(&self, tenant: &str, id: &str) -> Result<JobRecord> {
        let rec = self
            .store
            .job(tenant, id)?
            .ok_or_else(|| ServerError::NotFound(format!("job {id} not found")))?;
        if !rec.state.is_final() {
            if let Some(c) = self
                .cancels
                .lock()
                .unwrap()
                .get(&(tenant.to_string(), id.to_string()))
            {
                c.store(true, Ordering::Relaxed);
            }
            if rec.state == JobState::Queued {
                self.store
                    .end_job(tenant, id, JobState::Cancelled, "cancelled by the client")?;
            }
            tracing::info!(%tenant, job = %id, "job cancel requested");
            self.notify(tenant, id);
        }
        Ok(self.store.job(tenant, id)?.expect("job exists"))
    }

    fn run_one(&self, tenant: &str, id: &str, rt: &tokio::runtime::Handle) {
        let rec = match self.store.job(tenant, id) {
            Ok(Some(r)) => r,
            _ => return,
        };
        let cancel = Arc::new(AtomicBool::new(false));
        let key = (tenant.to_string(), id.to_string());
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
        let objects = TenantObjects::new(self.store.clone(), tenant);
        let mut last = Instant::now() - Duration::from_secs(1);
        let mut progress = |f: f32, msg: &str| {
            if last.elapsed() >= Duration::from_millis(100) || f >= 1.0 {
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
                let r = self
                    .store
                    .complete_job(tenant, id, &ready, out.compute.as_micros() as u64);
                self.ready.lock().unwrap().remove(&key);
                tracing::info!(%tenant, job = %id, outputs = n, compute_ms = out.compute.as_millis() as u64,
                    total_ms = t0.elapsed().as_millis() as u64, "job succeeded");
                r
            }
            Err(JobError::Cancelled) => {
                tracing::info!(%tenant, job = %id, "job cancelled");
                self.store
                    .end_job(tenant, id, JobState::Cancelled, "cancelled by the client")
            }
            Err(JobError::Invalid(m) | JobError::Failed(m)) => {
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
