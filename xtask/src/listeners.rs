//! The check that no test leaves a server behind: the TCP listeners on this machine (from
//! `/proc/net/tcp` and `/proc/net/tcp6`, state `0A`) before and after the test run. A listener
//! that appeared during the run and is still there after a short grace period fails the run,
//! named by address, port, pid and command line (the pid found through `/proc/*/fd` socket
//! inodes). Only the gate's own processes count: its descendants, and the processes that carry
//! its mark in their environment (`METAFORGE_GATE_PID`, which a server that outlived the test
//! that started it keeps). Anybody else's listener — a person's own `metaforge up` on the same
//! machine, another checkout's tests — is reported but not counted.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

/// One listening socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listener {
    address: String,
    port: u16,
}

/// The listening TCP sockets now, keyed by socket inode.
pub(crate) fn snapshot() -> BTreeMap<u64, Listener> {
    let mut found = BTreeMap::new();
    for (table, v6) in [("/proc/net/tcp", false), ("/proc/net/tcp6", true)] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) = (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            if *state != "0A" {
                continue;
            }
            let (Some((addr, port)), Ok(inode)) = (local.split_once(':'), inode.parse::<u64>()) else {
                continue;
            };
            let Ok(port) = u16::from_str_radix(port, 16) else {
                continue;
            };
            found.insert(
                inode,
                Listener {
                    address: decode_address(addr, v6),
                    port,
                },
            );
        }
    }
    found
}

/// `/proc/net/tcp*` addresses are hex, each 32-bit word in host (little-endian) order.
fn decode_address(hex: &str, v6: bool) -> String {
    let words: Vec<[u8; 4]> = hex
        .as_bytes()
        .chunks(8)
        .filter_map(|chunk| std::str::from_utf8(chunk).ok())
        .filter_map(|word| u32::from_str_radix(word, 16).ok())
        .map(u32::to_le_bytes)
        .collect();
    let bytes: Vec<u8> = words.into_iter().flatten().collect();
    if !v6 && bytes.len() == 4 {
        return format!("{}.{}.{}.{}", bytes[0], bytes[1], bytes[2], bytes[3]);
    }
    let octets: [u8; 16] = bytes.try_into().unwrap_or([0; 16]);
    format!("[{}]", std::net::Ipv6Addr::from(octets))
}

/// The pid owning the socket `inode`, from `/proc/*/fd`.
fn owner(inode: u64) -> Option<u32> {
    let wanted = format!("socket:[{inode}]");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|target| target.as_os_str() == wanted.as_str()) {
                return Some(pid);
            }
        }
    }
    None
}

/// The command line of `pid`, spaces between the arguments.
fn command_line(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            raw.split(|b| *b == 0)
                .filter(|arg| !arg.is_empty())
                .map(|arg| String::from_utf8_lossy(arg).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// Fails naming every listener that appeared since `before` and is still there after a grace
/// period (a killed process's socket closes within it), counting only the gate's own processes.
pub(crate) fn check_none_left(before: &BTreeMap<u64, Listener>) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let new: BTreeMap<u64, Listener> = loop {
        let current: BTreeMap<u64, Listener> = snapshot()
            .into_iter()
            .filter(|(inode, _)| !before.contains_key(inode))
            .collect();
        if current.is_empty() || Instant::now() >= deadline {
            break current;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let parents = crate::gate::parents();
    let mut left = Vec::new();
    for (inode, listener) in new {
        let pid = owner(inode);
        let described = match pid {
            Some(pid) => format!(
                "{}:{} held by pid {pid} `{}`",
                listener.address,
                listener.port,
                command_line(pid)
            ),
            None => format!(
                "{}:{} (socket inode {inode}, owner not found)",
                listener.address, listener.port
            ),
        };
        match pid {
            Some(pid) if crate::gate::is_ours(pid, &parents) || crate::gate::carries_mark(pid) => {
                left.push(described)
            }
            Some(_) => eprintln!("xtask: note: a listener this gate did not start: {described}"),
            None => eprintln!("xtask: note: a listener whose owner closed it meanwhile: {described}"),
        }
    }
    if left.is_empty() {
        eprintln!("xtask: no listener left behind by the tests");
        return Ok(());
    }
    bail!(
        "the tests left {} listener(s) running:\n  {}",
        left.len(),
        left.join("\n  ")
    )
}

#[cfg(test)]
mod tests {
    use super::{check_none_left, decode_address, snapshot};

    #[test]
    fn a_listener_opened_after_the_snapshot_fails_the_check_naming_port_and_process() {
        let before = snapshot();
        let leaked = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = leaked.local_addr().unwrap().port();
        let err = check_none_left(&before).unwrap_err().to_string();
        assert!(
            err.contains(&format!("127.0.0.1:{port} held by pid {}", std::process::id())),
            "{err}"
        );
        drop(leaked);
    }

    #[test]
    fn a_listener_of_a_process_the_gate_did_not_start_is_not_counted() {
        let before = snapshot();
        // `setsid` + a shell that exits at once: the listener's owner is reparented away from
        // this process and carries no gate mark.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let script = format!(
            "exec python3 -c 'import socket,time; s=socket.socket(); s.bind((\"127.0.0.1\",{port})); s.listen(); time.sleep(30)'"
        );
        std::process::Command::new("setsid")
            .args(["-f", "sh", "-c", &script])
            .env_remove(crate::gate::GATE_MARK)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !snapshot().values().any(|l| l.port == port) {
            assert!(
                std::time::Instant::now() < deadline,
                "the stranger never listened"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        // Another test of this process may hold a listener of its own meanwhile (a plain
        // `cargo test` runs them on threads of one process): only the stranger must go unnamed.
        let result = check_none_left(&before);
        let _ = std::process::Command::new("pkill")
            .args(["-f", &format!("s.bind((\"127.0.0.1\",{port}))")])
            .status();
        if let Err(err) = &result {
            assert!(!err.to_string().contains(&format!(":{port} ")), "{err}");
        }
    }

    #[test]
    fn proc_net_addresses_decode_to_dotted_and_bracketed_forms() {
        assert_eq!(decode_address("0100007F", false), "127.0.0.1");
        assert_eq!(decode_address("00000000", false), "0.0.0.0");
        assert_eq!(decode_address("00000000000000000000000001000000", true), "[::1]");
        assert_eq!(
            decode_address("0000000000000000FFFF00000100007F", true),
            "[::ffff:127.0.0.1]"
        );
    }
}
