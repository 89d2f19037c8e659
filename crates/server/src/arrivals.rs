//! Objects whose bytes have all arrived, and hash to their id, while the
//! store is still making them durable (the last direct writes, the fsyncs,
//! the metadata commit: several milliseconds for a ciphertext).
//!
//! A job may start on such an object: its inputs were decoded as they
//! streamed in, so storing them overlaps the compute instead of holding it
//! up. The object is not acknowledged to its uploader, nor listed or
//! downloadable, before it is stored, and a job that read one reports
//! success only once it is stored (see [`crate::exec::TenantObjects`]).

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Instant;

use hecloud_protocol::ObjectId;

/// How storing an arrived object ended: `Err` says why it was not stored.
#[derive(Debug, Default)]
pub struct Outcome {
    done: OnceLock<Result<(), String>>,
    /// Calls of [`Self::wait`] so far (see [`Self::waited`]).
    #[cfg(test)]
    waits: std::sync::atomic::AtomicUsize,
}

impl Outcome {
    /// Waits until the object is stored or has failed to be.
    pub fn wait(&self) -> &Result<(), String> {
        #[cfg(test)]
        self.waits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.done.wait()
    }

    /// Waits (polling, up to 10 s) until [`Self::wait`] has been called:
    /// a test resolves the outcome once a reader waits on it, instead of
    /// guessing how long that takes.
    #[cfg(test)]
    pub(crate) fn await_waiter(&self) {
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while self.waits.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "nothing waited");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// An arrived object, as a job sees it before it is stored.
#[derive(Debug, Clone)]
pub struct Arrival {
    /// Object kind.
    pub kind: String,
    /// Size in bytes.
    pub size: u64,
    /// Set once the store is done with it.
    pub outcome: Arc<Outcome>,
}

#[derive(Debug, Default)]
struct State {
    /// By (tenant, id); the same bytes may arrive in two uploads at once,
    /// each entry tagged by its serial.
    arrived: HashMap<(String, ObjectId), Vec<(u64, Arrival)>>,
    next_serial: u64,
    /// Bumped on every change, so that a waiter does not miss one that
    /// happened while it looked elsewhere (in the store).
    generation: u64,
    /// Waiters blocked in [`Arrivals::wait_until`] now.
    waiting: usize,
}

/// The objects of every tenant that have arrived and are being stored.
#[derive(Debug, Default)]
pub struct Arrivals {
    state: Mutex<State>,
    changed: Condvar,
}

impl Arrivals {
    /// Records that every byte of object `id` of `tenant` is in and
    /// verified. The guard must say how storing it ended; dropped, it says
    /// the object was not stored.
    pub fn arrived(
        self: &Arc<Self>,
        tenant: &str,
        id: ObjectId,
        kind: &str,
        size: u64,
    ) -> ArrivalGuard {
        let outcome = Arc::new(Outcome::default());
        let mut s = self.state.lock().unwrap();
        let serial = s.next_serial;
        s.next_serial += 1;
        s.generation += 1;
        s.arrived
            .entry((tenant.to_string(), id))
            .or_default()
            .push((
                serial,
                Arrival {
                    kind: kind.to_string(),
                    size,
                    outcome: outcome.clone(),
                },
            ));
        drop(s);
        self.changed.notify_all();
        ArrivalGuard {
            arrivals: self.clone(),
            key: (tenant.to_string(), id),
            serial,
            outcome,
            resolved: false,
        }
    }

    /// Object `id` of `tenant`, if it has arrived and is being stored.
    pub fn get(&self, tenant: &str, id: ObjectId) -> Option<Arrival> {
        let s = self.state.lock().unwrap();
        s.arrived
            .get(&(tenant.to_string(), id))
            .and_then(|v| v.first())
            .map(|(_, a)| a.clone())
    }

    /// Waits until `found` is true or `deadline` passes; `found` is called
    /// again after each arrival or store, and returns whether the
    /// waited-for object can be seen (arrived, or stored already).
    pub fn wait_until<E>(
        &self,
        deadline: Instant,
        mut found: impl FnMut() -> Result<bool, E>,
    ) -> Result<bool, E> {
        loop {
            let seen = self.state.lock().unwrap().generation;
            if found()? {
                return Ok(true);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            let mut s = self.state.lock().unwrap();
            if s.generation == seen {
                s.waiting += 1;
                let (mut s, _) = self.changed.wait_timeout(s, deadline - now).unwrap();
                s.waiting -= 1;
            }
        }
    }

    /// How many threads are blocked in [`Self::wait_until`] now: a test
    /// announces an object once its waiter is waiting, instead of guessing
    /// how long that takes.
    #[cfg(test)]
    pub(crate) fn waiters(&self) -> usize {
        self.state.lock().unwrap().waiting
    }

    /// Waits (polling, up to 10 s) until `n` threads wait in
    /// [`Self::wait_until`].
    #[cfg(test)]
    pub(crate) fn await_waiters(&self, n: usize) {
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while self.waiters() != n {
            assert!(Instant::now() < deadline, "no waiter came");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    fn resolve(&self, key: &(String, ObjectId), serial: u64) {
        let mut s = self.state.lock().unwrap();
        if let Some(v) = s.arrived.get_mut(key) {
            v.retain(|(n, _)| *n != serial);
            if v.is_empty() {
                s.arrived.remove(key);
            }
        }
        s.generation += 1;
        drop(s);
        self.changed.notify_all();
    }
}

/// The store's hold on an arrived object (see [`Arrivals::arrived`]).
#[derive(Debug)]
pub struct ArrivalGuard {
    arrivals: Arc<Arrivals>,
    key: (String, ObjectId),
    serial: u64,
    outcome: Arc<Outcome>,
    resolved: bool,
}

impl ArrivalGuard {
    /// The object is stored (it is in the store before this is called, so a
    /// job that no longer finds it here finds it there).
    pub fn stored(mut self) {
        self.resolve(Ok(()));
    }

    /// The object could not be stored, for `reason`.
    pub fn failed(mut self, reason: String) {
        self.resolve(Err(reason));
    }

    fn resolve(&mut self, r: Result<(), String>) {
        if !self.resolved {
            self.resolved = true;
            let _ = self.outcome.done.set(r);
            self.arrivals.resolve(&self.key, self.serial);
        }
    }
}

impl Drop for ArrivalGuard {
    fn drop(&mut self) {
        self.resolve(Err("the upload stopped before its object was stored".into()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const AB: ObjectId = ObjectId([0xab; 32]);
    const CD: ObjectId = ObjectId([0xcd; 32]);

    #[test]
    fn arrival_is_seen_until_resolved() {
        let a = Arc::new(Arrivals::default());
        let g = a.arrived("t", AB, "raw", 3);
        let seen = a.get("t", AB).unwrap();
        assert_eq!((seen.kind.as_str(), seen.size), ("raw", 3));
        assert!(a.get("u", AB).is_none(), "another tenant's arrival");
        g.stored();
        assert!(a.get("t", AB).is_none());
        assert_eq!(seen.outcome.wait(), &Ok(()));
    }

    #[test]
    fn a_dropped_guard_fails_the_object() {
        let a = Arc::new(Arrivals::default());
        let g = a.arrived("t", AB, "raw", 3);
        let seen = a.get("t", AB).unwrap();
        drop(g);
        assert!(seen.outcome.wait().is_err());
        assert!(a.get("t", AB).is_none());
    }

    #[test]
    fn the_same_bytes_in_two_uploads() {
        let a = Arc::new(Arrivals::default());
        let g1 = a.arrived("t", AB, "raw", 3);
        let g2 = a.arrived("t", AB, "raw", 3);
        g1.failed("disk full".into());
        let seen = a.get("t", AB).expect("the second is still arriving");
        g2.stored();
        assert_eq!(seen.outcome.wait(), &Ok(()));
    }

    #[test]
    fn a_waiter_wakes_on_arrival_and_gives_up_at_its_deadline() {
        let a = Arc::new(Arrivals::default());
        let a2 = a.clone();
        let waiter = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(10);
            a2.wait_until(deadline, || Ok::<_, ()>(a2.get("t", AB).is_some()))
        });
        // Announced only once the waiter waits: it must be woken by it.
        a.await_waiters(1);
        let g = a.arrived("t", AB, "raw", 3);
        assert_eq!(waiter.join().unwrap(), Ok(true));
        g.stored();
        let t = Instant::now();
        let r = a.wait_until(t + Duration::from_millis(50), || {
            Ok::<_, ()>(a.get("t", CD).is_some())
        });
        assert_eq!(r, Ok(false));
        assert!(t.elapsed() >= Duration::from_millis(50));
    }
}
