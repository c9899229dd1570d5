//! What `run` and `policy check` both say of a plan before anything starts.

/// One line for each `write` path a profile of `plan` names that does not exist here
/// (left out of the sandbox), each profile once: what `run` and `policy check` warn of.
pub fn missing_writes(plan: &wardcell_common::plan::Plan) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in plan.profiles() {
        for s in p.skipped.iter().filter(|s| s.rule == "write") {
            let line = format!(
                "warning: profile '{}' writes {:?}, which {}: it is left out of the sandbox; create it first if the sandbox should write there",
                p.name, s.path, s.reason
            );
            if !out.contains(&line) {
                out.push(line);
            }
        }
    }
    out
}
