//! The certificates a proxy that attaches credentials trusts upstream, which `wardcell
//! run` reads once when the run starts and the plan carries (`Plan::upstream_roots`).

use std::io::Read;
use std::path::{Path, PathBuf};

use wardcell_common::helper;

/// The most bytes of certificates [`read_roots`] reads, all files together.
pub const MAX_ROOTS: u64 = 8 * 1024 * 1024;

/// The most files [`read_roots`] reads from `SSL_CERT_DIR`.
pub const MAX_ROOT_FILES: usize = 4096;

/// The certificates a proxy that intercepts trusts upstream, read once when the run
/// starts, as rustls-native-certs would find them: the file `SSL_CERT_FILE` names and
/// the files of each directory `SSL_CERT_DIR` names (`:`-separated), or, when neither
/// is set, the distribution's bundle. Each a regular file (never a device, pipe or
/// socket, even through a link), at most [`MAX_ROOTS`] bytes in all. Nothing is parsed
/// here: the proxy takes the PEM certificates out of the text.
pub fn read_roots(get: &dyn Fn(&str) -> Option<String>) -> Result<Vec<u8>, String> {
    let (file, dirs) = (get("SSL_CERT_FILE"), get("SSL_CERT_DIR"));
    let mut files: Vec<PathBuf> = Vec::new();
    if file.is_none() && dirs.is_none() {
        let system = crate::sandbox_env::SYSTEM_ROOTS.iter().map(Path::new);
        files.extend(system.filter(|p| p.exists()).take(1).map(Path::to_path_buf));
    }
    files.extend(file.filter(|f| !f.is_empty()).map(PathBuf::from));
    for dir in dirs
        .iter()
        .flat_map(|d| d.split(':'))
        .filter(|d| !d.is_empty())
    {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("SSL_CERT_DIR: {dir}: {e}"))?;
        let mut names: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        names.sort();
        // Only what is a file there (links followed, to their end): a directory's other
        // entries are no certificates.
        files.extend(names.into_iter().filter(|p| p.is_file()));
        if files.len() > MAX_ROOT_FILES {
            return Err(format!(
                "SSL_CERT_DIR names more than {MAX_ROOT_FILES} files"
            ));
        }
    }
    let mut out = Vec::new();
    for f in files {
        let (file, meta) = helper::open_regular(&f).map_err(|e| format!("CA certificates: {e}"))?;
        let room = MAX_ROOTS - out.len() as u64;
        if meta.len() > room
            || file.take(room + 1).read_to_end(&mut out).is_err()
            || out.len() as u64 > MAX_ROOTS
        {
            return Err(format!("CA certificates: {} is unreadable or takes the certificates over {MAX_ROOTS} bytes", f.display()));
        }
        out.push(b'\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_are_read_once_bounded_and_never_from_a_device() {
        let dir = std::env::temp_dir().join(format!("wardcell-roots-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("certs")).unwrap();
        std::fs::write(dir.join("one.pem"), "ONE").unwrap();
        std::fs::write(dir.join("certs/a.pem"), "A").unwrap();
        std::fs::write(dir.join("certs/b.pem"), "B").unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.join("zero.pem")).unwrap();
        let env = |file: Option<&Path>, d: Option<&Path>| {
            let (file, d) = (
                file.map(|p| p.display().to_string()),
                d.map(|p| p.display().to_string()),
            );
            move |k: &str| match k {
                "SSL_CERT_FILE" => file.clone(),
                "SSL_CERT_DIR" => d.clone(),
                _ => None,
            }
        };
        let one = dir.join("one.pem");
        assert_eq!(read_roots(&env(Some(&one), None)).unwrap(), b"ONE\n");
        let both = read_roots(&env(Some(&one), Some(&dir.join("certs")))).unwrap();
        assert_eq!(both, b"ONE\nA\nB\n");
        let e = read_roots(&env(Some(&dir.join("zero.pem")), None)).unwrap_err();
        assert!(e.ends_with("zero.pem is not a regular file"), "{e}");
        let e = read_roots(&env(Some(Path::new("/dev/zero")), None)).unwrap_err();
        assert_eq!(e, "CA certificates: /dev/zero is not a regular file");
        // A device inside SSL_CERT_DIR is no file of it.
        assert_eq!(read_roots(&env(None, Some(&dir))).unwrap(), b"ONE\n");
        let e = read_roots(&env(None, Some(&dir.join("missing")))).unwrap_err();
        assert!(e.starts_with("SSL_CERT_DIR: "), "{e}");
        // Over the bound: refused, not read on.
        let big = dir.join("big.pem");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_ROOTS + 1)
            .unwrap();
        let e = read_roots(&env(Some(&big), None)).unwrap_err();
        assert!(e.contains("over 8388608 bytes"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
