//! Machine-readable summaries of the benches that print tables instead of
//! going through criterion (`blocking`, `million`). Each writes
//! `<target>/gofer-bench/<name>.json`, which `scripts/plot.py` reads next to
//! criterion's own output.

use std::path::PathBuf;

/// `<target>/gofer-bench/<name>.json`, where `<target>` is `CARGO_TARGET_DIR`
/// when set (as criterion does), else the workspace's `target` directory
/// (the root package's, one level up from this one).
fn path(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("gofer-bench").join(format!("{name}.json"))
}

/// Writes `json` (an already formatted JSON document) as the summary `name`,
/// and says where.
pub fn write(name: &str, json: &str) {
    let path = path(name);
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&path, json));
    match written {
        Ok(()) => println!("summary written to {}", path.display()),
        Err(e) => eprintln!("cannot write {}: {e}", path.display()),
    }
}

/// `s` as a JSON string literal.
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
