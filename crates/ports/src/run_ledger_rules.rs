//! The run ledger's rules, once, on its own record types (FORGE-401/485): what a new run and a
//! transition must look like, and when a transition may follow the latest one. Every engine (SQLite,
//! the test double) checks here and only persists, guarded by compare-and-set on the sequence
//! number it read, so two writers racing on one run produce one winner and the loser a `Conflict`.

use crate::error::{PortError, PortErrorKind};
use crate::run_ledger::{RunRecord, RunStatus, RunTransition};

/// The conflict for an attempt to move a terminal run: a completed, failed or canceled run never
/// reopens.
pub fn terminal_run_conflict(id: &str, from: RunStatus, to: RunStatus) -> PortError {
    PortError::new(
        PortErrorKind::Conflict,
        format!(
            "run {id} is {}, which is terminal; it cannot move to {}",
            from.as_str(),
            to.as_str()
        ),
    )
}

fn invalid(field: &str, why: &str) -> PortError {
    PortError::new(PortErrorKind::Invalid, format!("{field}: {why}"))
}

impl RunRecord {
    /// Refuses a run that cannot be created, naming the field.
    pub fn check_new(&self) -> Result<(), PortError> {
        for (field, value) in [
            ("id", &self.id),
            ("template_id", &self.template_id),
            ("flow_version_id", &self.flow_version_id),
            ("content_hash", &self.content_hash),
        ] {
            if value.trim().is_empty() {
                return Err(invalid(&format!("run.{field}"), "must not be empty"));
            }
        }
        Ok(())
    }
}

impl RunTransition {
    /// Refuses a malformed transition, naming the field: it names a run, its state is that run's,
    /// its sequence starts at 1, and only the start (seq 1) has no event.
    pub fn check(&self) -> Result<(), PortError> {
        if self.run_id.trim().is_empty() {
            return Err(invalid("transition.run_id", "must not be empty"));
        }
        if self.state.run_id != self.run_id {
            return Err(invalid(
                "transition.state.run_id",
                &format!(
                    "is {:?}, not the transition's run {:?}",
                    self.state.run_id, self.run_id
                ),
            ));
        }
        match (self.seq, &self.event) {
            (0, _) => Err(invalid("transition.seq", "starts at 1")),
            (1, None) => Ok(()),
            (1, Some(_)) => Err(invalid(
                "transition.event",
                "the first transition (the start) has no event",
            )),
            (_, None) => Err(invalid(
                "transition.event",
                "only the first transition has no event",
            )),
            (_, Some(_)) => Ok(()),
        }
    }

    /// Refuses a first transition that does not start `record`: seq 1, the same run, and the
    /// record's status is the state's.
    pub fn check_first_of(&self, record: &RunRecord) -> Result<(), PortError> {
        self.check()?;
        if self.seq != 1 {
            return Err(invalid("transition.seq", "a run's first transition is seq 1"));
        }
        if self.run_id != record.id {
            return Err(invalid(
                "transition.run_id",
                &format!("is {:?}, not the new run {:?}", self.run_id, record.id),
            ));
        }
        if self.state.status != record.status {
            return Err(invalid(
                "run.status",
                &format!(
                    "is {}, but the first state is {}",
                    record.status.as_str(),
                    self.state.status.as_str()
                ),
            ));
        }
        Ok(())
    }

    /// Refuses appending this transition to a run whose latest transition is `latest_seq` and whose
    /// status is `status`: a terminal run takes nothing more, and the sequence must follow
    /// without a gap (anything else means another writer moved the run first).
    pub fn check_follows(&self, latest_seq: u64, status: RunStatus) -> Result<(), PortError> {
        self.check()?;
        if status.is_terminal() {
            return Err(terminal_run_conflict(&self.run_id, status, self.state.status));
        }
        if latest_seq == 0 {
            return Err(PortError::new(
                PortErrorKind::Conflict,
                format!(
                    "run {} has no recorded engine state to follow (it was not started with create_started)",
                    self.run_id
                ),
            ));
        }
        if self.seq != latest_seq.saturating_add(1) {
            return Err(PortError::new(
                PortErrorKind::Conflict,
                format!(
                    "run {} is at transition {latest_seq}, so transition {} does not follow it (another writer moved the run)",
                    self.run_id, self.seq
                ),
            ));
        }
        Ok(())
    }
}

/// The answer of [`crate::RunLedger::claim_published`] for a run whose published mark is
/// `published`: where the claim starts when the mark is below `upto` (the ledger then moves it
/// to `upto` in the same write), `None` when another process claimed that far already.
pub fn published_claim(published: u64, upto: u64) -> Option<u64> {
    (published < upto).then_some(published)
}

/// Refuses marking transition `seq` settled on a run whose latest transition is `latest_seq`.
pub fn check_settle(run_id: &str, seq: u64, latest_seq: u64) -> Result<(), PortError> {
    if seq > latest_seq {
        return Err(invalid(
            "settled.seq",
            &format!("run {run_id} is at transition {latest_seq}; {seq} has not happened"),
        ));
    }
    Ok(())
}
