//! Key-holder sessions: the bidirectional stream on which the server calls
//! back a tenant's key holder (e.g. to refresh a ciphertext) and waits for
//! the answer.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hecloud_protocol::rpc::{CallbackRequest, SessionServerMsg, session_server_msg};
use tokio::sync::{mpsc, oneshot};

use crate::error::{Result, ServerError};

/// Calls waiting for their reply, by request id: the tenant and session
/// the request went to, and where the reply goes.
type Pending = HashMap<
    u64,
    (
        String,
        u64,
        oneshot::Sender<std::result::Result<Vec<u8>, String>>,
    ),
>;

#[derive(Debug)]
struct Session {
    id: u64,
    tenant: String,
    capabilities: Vec<String>,
    tx: mpsc::Sender<std::result::Result<SessionServerMsg, tonic::Status>>,
}

/// Every open key-holder session, by tenant.
#[derive(Debug, Default)]
pub struct SessionHub {
    sessions: Mutex<Vec<Session>>,
    pending: Mutex<Pending>,
    next: AtomicU64,
    /// Set when the server stops: every session's stream ends.
    closing: tokio::sync::watch::Sender<bool>,
}

/// How long a callback waits for a key holder to connect.
pub const SESSION_WAIT: Duration = Duration::from_secs(5);

/// Largest callback payload (request or reply).
pub const MAX_CALLBACK_BYTES: usize = 64 << 20;

impl SessionHub {
    /// Registers a session; returns its id.
    pub fn register(
        &self,
        tenant: &str,
        capabilities: Vec<String>,
        tx: mpsc::Sender<std::result::Result<SessionServerMsg, tonic::Status>>,
    ) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.sessions.lock().unwrap().push(Session {
            id,
            tenant: tenant.into(),
            capabilities,
            tx,
        });
        id
    }

    /// Ends every session's stream: the server is stopping (a key holder
    /// keeps its stream open, and with it the connection, until told).
    pub fn close_all(&self) {
        self.closing.send_replace(true);
        self.sessions.lock().unwrap().clear();
    }

    /// Resolves when [`Self::close_all`] has been called.
    pub fn closed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.closing.subscribe();
        async move {
            let _ = rx.wait_for(|c| *c).await;
        }
    }

    /// Removes a session (its stream ended); the calls waiting on it fail
    /// at once ("the key-holder session closed") instead of at their
    /// timeout.
    pub fn unregister(&self, id: u64) {
        self.sessions.lock().unwrap().retain(|s| s.id != id);
        self.pending
            .lock()
            .unwrap()
            .retain(|_, (_, sid, _)| *sid != id);
    }

    /// Number of open sessions of a tenant.
    pub fn count(&self, tenant: &str) -> usize {
        self.sessions
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.tenant == tenant)
            .count()
    }

    /// Whether a session of `tenant` answers callbacks of `kind` now.
    pub fn serves(&self, tenant: &str, kind: &str) -> bool {
        self.sessions
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.tenant == tenant && s.capabilities.iter().any(|c| c == kind))
    }

    /// Routes a key holder's reply to the waiting call. Replies to unknown
    /// request ids (late, or for another tenant) are dropped.
    pub fn deliver(
        &self,
        tenant: &str,
        request_id: u64,
        reply: std::result::Result<Vec<u8>, String>,
    ) {
        // A reply is accepted only from a session of the tenant the request went to.
        let mut p = self.pending.lock().unwrap();
        if p.get(&request_id).is_some_and(|(t, _, _)| t == tenant)
            && let Some((_, _, tx)) = p.remove(&request_id)
        {
            let _ = tx.send(reply);
        }
    }

    /// Sends `kind`/`payload` to one of `tenant`'s key holders that announced
    /// `kind` and waits for its answer: `timeout` in all, of which at most
    /// [`SESSION_WAIT`] for a key holder to (re)connect.
    pub async fn call(
        &self,
        tenant: &str,
        kind: &str,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        if payload.len() > MAX_CALLBACK_BYTES {
            return Err(ServerError::InvalidArgument(
                "callback payload too large".into(),
            ));
        }
        // A key holder may be (re)connecting: wait for one a little while.
        let start = tokio::time::Instant::now();
        let deadline = start + SESSION_WAIT.min(timeout);
        let (session, tx) = loop {
            let found = {
                let s = self.sessions.lock().unwrap();
                s.iter()
                    .rev()
                    .find(|s| s.tenant == tenant && s.capabilities.iter().any(|c| c == kind))
                    .map(|s| (s.id, s.tx.clone()))
            };
            match found {
                Some(found) => break found,
                None if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                None => {
                    return Err(ServerError::Precondition(format!(
                        "no key-holder session answers `{kind}` for this tenant"
                    )));
                }
            }
        };
        let request_id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (otx, orx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap()
            .insert(request_id, (tenant.to_string(), session, otx));
        let msg = SessionServerMsg {
            msg: Some(session_server_msg::Msg::Request(CallbackRequest {
                request_id,
                kind: kind.into(),
                payload,
            })),
        };
        if tx.send(Ok(msg)).await.is_err() {
            self.pending.lock().unwrap().remove(&request_id);
            return Err(ServerError::Precondition(
                "the key-holder session closed".into(),
            ));
        }
        let out = tokio::time::timeout_at(start + timeout, orx).await;
        self.pending.lock().unwrap().remove(&request_id);
        match out {
            Err(_) => Err(ServerError::Precondition(format!(
                "the key holder did not answer within {timeout:?}"
            ))),
            Ok(Err(_)) => Err(ServerError::Precondition(
                "the key-holder session closed".into(),
            )),
            Ok(Ok(Err(e))) => Err(ServerError::Precondition(format!(
                "the key holder refused: {e}"
            ))),
            Ok(Ok(Ok(bytes))) => Ok(bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_without_a_key_holder_fails_within_its_timeout() {
        let hub = SessionHub::default();
        let timeout = Duration::from_millis(200);
        let t = std::time::Instant::now();
        let r = hub.call("t", "echo", vec![1], timeout).await;
        let waited = t.elapsed();
        match r {
            Err(ServerError::Precondition(m)) => {
                assert!(m.contains("no key-holder session"), "{m}")
            }
            other => panic!("expected a precondition error, got {other:?}"),
        }
        assert!(waited >= timeout, "gave up after {waited:?}");
        assert!(
            waited < SESSION_WAIT,
            "waited {waited:?}, the session wait and not the call's timeout"
        );
    }
}
