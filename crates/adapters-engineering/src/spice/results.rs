//! Reading what ngspice printed and wrote: `name = value` lines (an operating point, `.meas`
//! results), `wrdata` tables, and what a caller reads from them (a bounded number of points
//! keeping each stretch's extremes, the −3 dB points of a response).

use std::collections::BTreeMap;

/// `name = value` lines of ngspice's output (an operating point's `print all`, `.meas`
/// results), in the order printed; a name printed twice keeps its last value.
pub fn assignments(output: &str) -> BTreeMap<String, f64> {
    output
        .lines()
        .filter_map(|line| {
            let (name, value) = line.split_once('=')?;
            let name = name.trim();
            if name.is_empty() || name.contains(' ') {
                return None;
            }
            let value: f64 = value.split_whitespace().next()?.parse().ok()?;
            Some((name.to_ascii_lowercase(), value))
        })
        .collect()
}

/// The errors ngspice reported (`Error on line …`, `Error: …`), one entry each with the lines
/// that explain it.
pub fn errors(output: &str) -> Vec<String> {
    let lines: Vec<&str> = output.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let lower = line.to_ascii_lowercase();
        if lower.starts_with("error") || lower.contains("fatal error") {
            let detail: Vec<&str> = lines[i + 1..]
                .iter()
                .take(2)
                .map(|l| l.trim())
                .filter(|l| !l.is_empty())
                .collect();
            found.push(
                std::iter::once(line.trim())
                    .chain(detail)
                    .collect::<Vec<_>>()
                    .join(" | "),
            );
        }
    }
    found
}

/// A `wrdata` table: each row's columns, as written (pairs of scale and value per vector).
pub fn table(text: &str) -> Vec<Vec<f64>> {
    text.lines()
        .map(|line| {
            line.split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect::<Vec<f64>>()
        })
        .filter(|row| !row.is_empty())
        .collect()
}

/// At most `limit` points of `(x, y)` keeping the shape: the first and last point, and in each
/// of the `limit / 2` stretches between them its lowest and highest point (in order).
pub fn downsample(points: &[(f64, f64)], limit: usize) -> Vec<(f64, f64)> {
    if points.len() <= limit || limit < 4 {
        return points.to_vec();
    }
    let buckets = (limit - 2) / 2;
    let inner = &points[1..points.len() - 1];
    let mut out = vec![points[0]];
    for b in 0..buckets {
        let start = b * inner.len() / buckets;
        let end = ((b + 1) * inner.len() / buckets).max(start + 1).min(inner.len());
        let stretch = &inner[start..end];
        let low = stretch.iter().enumerate().min_by(|a, b| a.1.1.total_cmp(&b.1.1));
        let high = stretch.iter().enumerate().max_by(|a, b| a.1.1.total_cmp(&b.1.1));
        if let (Some((li, l)), Some((hi, h))) = (low, high) {
            if li == hi {
                out.push(*l);
            } else if li < hi {
                out.extend([*l, *h]);
            } else {
                out.extend([*h, *l]);
            }
        }
    }
    out.push(points[points.len() - 1]);
    out
}

/// The frequencies where a magnitude response (`(frequency, dB)`, rising frequency) crosses
/// 3.0103 dB below its peak, interpolated in log frequency: a low-pass has one above its
/// passband, a band-pass one on each side.
pub fn minus_3db_points(response: &[(f64, f64)]) -> Vec<f64> {
    let Some(peak) = response.iter().map(|p| p.1).reduce(f64::max) else {
        return Vec::new();
    };
    let level = peak - 10.0 * 2.0_f64.log10();
    response
        .windows(2)
        .filter_map(|pair| {
            let ((f0, m0), (f1, m1)) = (pair[0], pair[1]);
            let crosses = (m0 - level) * (m1 - level) < 0.0 || (m1 == level && m0 != level);
            if !crosses || f0 <= 0.0 || f1 <= 0.0 {
                return None;
            }
            let t = (level - m0) / (m1 - m0);
            Some(10_f64.powf(f0.log10() + t * (f1.log10() - f0.log10())))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operating_point_and_measurements_are_read_from_the_printout() {
        let out = "No. of Data Rows : 1\nin = 5.000000e+00\nout = 2.500000e+00\nv1#branch = -2.50000e-04\nf3db                =  1.591563e+02\n";
        let read = assignments(out);
        assert_eq!(read["out"], 2.5);
        assert_eq!(read["v1#branch"], -2.5e-4);
        assert!((read["f3db"] - 159.1563).abs() < 1e-9);
        assert!(!read.contains_key("no. of data rows"));
    }

    #[test]
    fn downsampling_keeps_the_ends_and_every_stretchs_extremes() {
        let points: Vec<(f64, f64)> = (0..1000)
            .map(|i| (f64::from(i), if i == 500 { 9.0 } else { 0.0 }))
            .collect();
        let kept = downsample(&points, 20);
        assert!(kept.len() <= 20);
        assert_eq!(kept.first(), Some(&(0.0, 0.0)));
        assert_eq!(kept.last(), Some(&(999.0, 0.0)));
        assert!(kept.contains(&(500.0, 9.0)), "the spike survives: {kept:?}");
        assert!(kept.windows(2).all(|w| w[0].0 < w[1].0), "in order");
    }

    #[test]
    fn a_low_pass_has_one_minus_3db_point_where_it_crosses() {
        // 20·log10(1/sqrt(1+(f/fc)^2)) with fc = 100 Hz, sampled every decade/20.
        let response: Vec<(f64, f64)> = (0..=80)
            .map(|i| {
                let f = 10_f64.powf(f64::from(i) / 20.0);
                (f, -10.0 * (1.0 + (f / 100.0).powi(2)).log10())
            })
            .collect();
        let points = minus_3db_points(&response);
        assert_eq!(points.len(), 1, "{points:?}");
        assert!((points[0] - 100.0).abs() / 100.0 < 0.01, "{points:?}");
    }
}
