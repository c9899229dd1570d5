//! A profile's limits as zones.toml writes them: sizes and CPU shares read (shown back
//! by `wardcell_common::limits::show_size` and `Kind::show`).

use wardcell_common::limits::{show_size, Bound, Kind, Limits, UNITS};

/// Every limit, in the order they are listed and chosen.
pub const ALL: [Kind; 4] = [Kind::Processes, Kind::Memory, Kind::Cpu, Kind::Time];

/// One of `limits`.
pub fn get(limits: &Limits, kind: Kind) -> Option<Bound> {
    match kind {
        Kind::Processes => limits.processes,
        Kind::Memory => limits.memory,
        Kind::Cpu => limits.cpu,
        Kind::Time => limits.time,
    }
}

/// Set one of `limits`.
pub fn set(limits: &mut Limits, kind: Kind, bound: Option<Bound>) {
    *match kind {
        Kind::Processes => &mut limits.processes,
        Kind::Memory => &mut limits.memory,
        Kind::Cpu => &mut limits.cpu,
        Kind::Time => &mut limits.time,
    } = bound;
}

/// Each limit of `limits` that is set, in [`ALL`]'s order.
pub fn set_ones(limits: &Limits) -> impl Iterator<Item = (Kind, Bound)> + '_ {
    ALL.into_iter()
        .filter_map(|k| get(limits, k).map(|b| (k, b)))
}

/// The bound of the built-in profiles (`base`): far above what a real build runs at once
/// (a parallel build's compilers, linkers and test threads: hundreds), far below what a
/// fork loop reaches in a second (tens of thousands, the host's whole pid space).
pub const DEFAULT_PROCESSES: u64 = 4096;

/// The least `memory` a sandbox can start with (its shim, the command's exec).
pub const MIN_MEMORY: u64 = 16 * 1024 * 1024;

/// The most `cpu` (percent): 1,024 CPUs.
pub const MAX_CPU: u64 = 100 * 1024;

/// A size as zones.toml writes it: bytes, or a whole number of `K`, `M`, `G` or `T`
/// (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let hint = "write a size like \"512M\", \"2G\" or \"1T\" (powers of 1024), or \"none\"";
    let (digits, mult) = match s.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some(c) => match UNITS.iter().find(|(u, _)| *u == c) {
            Some((_, m)) => (&s[..s.len() - 1], *m),
            None => (s, 1),
        },
        None => (s, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{s:?} is not a size: {hint}"));
    }
    let n = digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("{s:?} is too large a size"))?;
    if n < MIN_MEMORY {
        return Err(format!(
            "{s:?} is below the {} a sandbox needs to start: {hint}",
            show_size(MIN_MEMORY)
        ));
    }
    Ok(n)
}

/// A CPU share: `"50%"` of one CPU, `"200%"` for two.
pub fn parse_percent(s: &str) -> Result<u64, String> {
    let hint = "write a share of one CPU like \"50%\" or \"200%\" (two CPUs), or \"none\"";
    let n = s
        .strip_suffix('%')
        .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|d| d.parse::<u64>().ok())
        .ok_or_else(|| format!("{s:?} is not a CPU share: {hint}"))?;
    if n == 0 || n > MAX_CPU {
        return Err(format!(
            "{s:?} is out of range: from 1% to {MAX_CPU}%; {hint}"
        ));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_shares_read_as_written() {
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("512m"), Ok(512 << 20));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("33554432"), Ok(32 << 20));
        for bad in ["", "G", "2GB", "-1G", "1.5G", "2 G", "99999999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert!(parse_size("1M").unwrap_err().contains("below the 16M"));
        assert_eq!(parse_percent("200%"), Ok(200));
        assert_eq!(parse_percent("1%"), Ok(1));
        for bad in ["0%", "200", "%", "1.5%", "102401%", "-5%"] {
            assert!(parse_percent(bad).is_err(), "{bad}");
        }
    }
}
