//! The listeners' slow-client limits as the operator sets them (`METAFORGE_HTTP_*`); the
//! listener itself is `metaforge_gateway::listen`.

use std::time::Duration;

use metaforge_gateway::listen::Limits;

use crate::settings::Environment;

/// The defaults with each `METAFORGE_HTTP_*` override applied; a bad value is an error naming
/// the variable (seconds may be fractional, e.g. `0.5`).
pub(crate) fn http_limits(env: &Environment) -> anyhow::Result<Limits> {
    let defaults = Limits::default();
    let seconds =
        |name: &str, default: Duration| env.get(name).map_or(Ok(default), |raw| parse_seconds(name, &raw));
    Ok(Limits {
        header_read: seconds("METAFORGE_HTTP_HEADER_TIMEOUT_SECS", defaults.header_read)?,
        body_idle: seconds("METAFORGE_HTTP_BODY_TIMEOUT_SECS", defaults.body_idle)?,
        request_read: seconds("METAFORGE_HTTP_REQUEST_TIMEOUT_SECS", defaults.request_read)?,
        max_connections: match env.get("METAFORGE_HTTP_MAX_CONNECTIONS") {
            None => defaults.max_connections,
            Some(raw) => match raw.trim().parse::<usize>() {
                Ok(n) if n > 0 => n,
                _ => {
                    anyhow::bail!(
                        "METAFORGE_HTTP_MAX_CONNECTIONS={raw}: expected a whole number of connections, at least 1"
                    );
                }
            },
        },
    })
}

fn parse_seconds(name: &str, raw: &str) -> anyhow::Result<Duration> {
    raw.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| anyhow::anyhow!("{name}={raw}: expected a number of seconds between 0 and 86400"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_timeout_is_refused_naming_the_variable() {
        for raw in ["0", "-1", "soon", "NaN", "1e9"] {
            let err = parse_seconds("METAFORGE_HTTP_HEADER_TIMEOUT_SECS", raw);
            assert!(err.is_err(), "{raw} accepted");
            assert!(err.is_err_and(|e| e.to_string().contains("METAFORGE_HTTP_HEADER_TIMEOUT_SECS")));
        }
        assert_eq!(
            parse_seconds("X", "0.5").ok(),
            Some(Duration::from_millis(500)),
            "fractional seconds are allowed"
        );
    }
}
