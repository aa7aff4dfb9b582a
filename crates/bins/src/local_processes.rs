//! This host as the leases see it (`metaforge_app::processes::LocalProcesses`): its name and
//! whether a pid still runs, read from Linux's `/proc`. Without `/proc` no holder counts as
//! local, so a lease is only ever waited out, never released early on a guess.

use std::path::Path;

/// This process's name on the ledgers it shares (`host/pid/unique`, one per start): written on
/// the holds it parks and held as its presence and engine leases.
pub(crate) fn this_process(ids: &dyn metaforge_ports::IdGen) -> String {
    use metaforge_app::processes::LocalProcesses as _;
    metaforge_app::processes::process_name(
        &ThisHost.host().unwrap_or_else(|| "unknown-host".to_owned()),
        std::process::id(),
        &ids.new_id(),
    )
}

/// The host this process runs on.
pub(crate) struct ThisHost;

impl metaforge_app::processes::LocalProcesses for ThisHost {
    fn host(&self) -> Option<String> {
        if !Path::new("/proc/self").exists() {
            return None;
        }
        let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
        let name = name.trim();
        (!name.is_empty()).then(|| name.to_owned())
    }

    fn is_alive(&self, pid: u32) -> bool {
        // A zombie (killed, not yet reaped by its parent) holds nothing: it runs no code.
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
            Err(_) => false,
        }
    }
}
