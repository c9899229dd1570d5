//! Run ids: `YYYYMMDDTHHMMSSZ-` and 8 random hex digits. Sortable by start time, unique
//! enough for one user's runs, and safe as a file name.

use std::time::{SystemTime, UNIX_EPOCH};

use wardcell_common::audit::civil;

/// `secs` since the epoch as `YYYYMMDDTHHMMSSZ`.
pub fn timestamp(secs: i64) -> String {
    let (y, m, d) = civil(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// A new run's id: the time and 4 bytes from the kernel's random source.
pub fn new() -> std::io::Result<String> {
    let mut random = [0u8; 4];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut random)?;
    Ok(new_run_id(random))
}

pub fn new_run_id(random: [u8; 4]) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{hex}", timestamp(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(timestamp(0), "19700101T000000Z");
        assert_eq!(timestamp(951_782_400), "20000229T000000Z");
        assert_eq!(timestamp(1_796_203_932), "20261202T093212Z"); // date -u -d @1796203932
    }

    #[test]
    fn ids_are_valid() {
        let id = new_run_id([0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(id.len(), 25, "{id}");
        assert!(id.ends_with("-deadbeef"));
        assert!(id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    }
}
