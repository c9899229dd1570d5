//! Tracing in a helper the broker starts (the shim, the proxy): as its spec says.

use wardcell_common::trace;

/// A helper's side of `wardcell_common::trace::spec`: trace from now on, as `process`, with the run id given.
/// A level it cannot read leaves tracing off.
pub fn install_from(process: &'static str, spec: Option<&wardcell_common::plan::TraceSpec>) {
    if let Some(s) = spec {
        if let Ok(Some(level)) = trace::parse(&s.level) {
            trace::set_run(&s.run);
            trace::install(process, level);
        }
    }
}
