//! Time and identity come in through ports, so the domain can be replayed deterministically.

/// A point in time, always UTC.
pub type Timestamp = chrono::DateTime<chrono::Utc>;

/// The source of "now". Production uses the system clock; tests pin it.
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

/// The source of new record ids (uuid v7 in production, so ids sort by creation time).
pub trait IdGen: Send + Sync {
    /// A fresh, unique id in its canonical textual form.
    fn new_id(&self) -> String;
}
