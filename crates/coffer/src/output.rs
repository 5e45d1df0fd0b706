//! Printing: human text or JSON, and the formatting helpers both use.

use serde_json::json;

/// Prints an error to stderr: one line of text, or a JSON object with the exit code.
pub fn error(json: bool, err: &anyhow::Error, code: u8) {
    if json {
        let causes: Vec<String> = err.chain().skip(1).map(|c| c.to_string()).collect();
        eprintln!("{}", json!({"type": "error", "message": err.to_string(), "causes": causes, "exit_code": code}));
    } else {
        eprintln!("error: {err:#}");
    }
}

/// Prints one JSON document (or line) to stdout.
pub fn json(value: &serde_json::Value) {
    println!("{value}");
}

/// Formats a byte count with binary units: `1.5 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{n} B") } else { format!("{v:.2} {}", UNITS[u]) }
}

/// Formats a snapshot time (RFC 3339) as `YYYY-MM-DD HH:MM:SS` UTC.
pub fn time(rfc3339: &str) -> String {
    rfc3339.get(..19).map(|s| s.replace('T', " ")).unwrap_or_else(|| rfc3339.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn byte_units() {
        assert_eq!(super::bytes(10), "10 B");
        assert_eq!(super::bytes(1536), "1.50 KiB");
        assert_eq!(super::bytes(3 << 30), "3.00 GiB");
    }
}
