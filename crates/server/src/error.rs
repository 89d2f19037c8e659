//! Server errors and their gRPC status codes.

use thiserror::Error;

/// Everything that can go wrong in the server.
#[derive(Debug, Error)]
pub enum ServerError {
    /// Bad input from a client (gRPC INVALID_ARGUMENT).
    #[error("{0}")]
    InvalidArgument(String),
    /// Missing or unknown bearer token (UNAUTHENTICATED).
    #[error("{0}")]
    Unauthenticated(String),
    /// No such object/job for this tenant (NOT_FOUND).
    #[error("{0}")]
    NotFound(String),
    /// A tenant quota is exhausted (RESOURCE_EXHAUSTED).
    #[error("{0}")]
    Quota(String),
    /// The request conflicts with the current state (FAILED_PRECONDITION).
    #[error("{0}")]
    Precondition(String),
    /// Something the request would create exists already, differently
    /// (ALREADY_EXISTS).
    #[error("{0}")]
    AlreadyExists(String),
    /// A stored object's bytes no longer match its id (DATA_LOSS).
    #[error("{0}")]
    Damaged(String),
    /// Configuration error.
    #[error("configuration: {0}")]
    Config(String),
    /// I/O error.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// Database error.
    #[error("database: {0}")]
    Db(#[from] rusqlite::Error),
    /// TLS / certificate error.
    #[error("tls: {0}")]
    Tls(String),
    /// Transport error.
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// A bug or an unexpected condition.
    #[error("internal: {0}")]
    Internal(String),
}

/// Result with [`ServerError`].
pub type Result<T> = std::result::Result<T, ServerError>;

impl From<ServerError> for tonic::Status {
    fn from(e: ServerError) -> Self {
        use tonic::Status;
        match e {
            ServerError::InvalidArgument(m) => Status::invalid_argument(m),
            ServerError::Unauthenticated(m) => Status::unauthenticated(m),
            ServerError::NotFound(m) => Status::not_found(m),
            ServerError::Quota(m) => Status::resource_exhausted(m),
            ServerError::Precondition(m) => Status::failed_precondition(m),
            ServerError::AlreadyExists(m) => Status::already_exists(m),
            ServerError::Damaged(m) => Status::data_loss(m),
            other => {
                // Details go to the log, not to the client.
                tracing::error!(error = %other, "internal error");
                Status::internal("internal server error")
            }
        }
    }
}
