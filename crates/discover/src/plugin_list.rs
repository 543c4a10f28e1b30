//! The one list of plugins: the built-in ones in running order, and the external ones found on
//! the search path, merged between the vendor plugins and the generic fallback. Everything that
//! discovers, grades, isolates or samples (the CLI, Python, the agent, conformance, `env`)
//! takes its plugins from here.

use accel_model::Warning;

use crate::exec::ExecOptions;
use crate::{GenericPci, Vendor};

/// Every plugin this build knows, in the order they run: the family modules by their `ORDER`
/// (the platform plugin, order 0, runs first: its metadata feeds the TPU plugin); the generic
/// PCI plugin runs last and picks up whatever no vendor plugin claimed.
pub fn default_plugins() -> Vec<Box<dyn Vendor>> {
    let mut families = crate::families::all();
    families.sort_by_key(|(order, plugin)| (*order, plugin.id()));
    let mut plugins: Vec<Box<dyn Vendor>> = families.into_iter().map(|(_, p)| p).collect();
    plugins.push(Box::new(GenericPci));
    plugins
}

/// The built-in plugins and the external ones `options` finds (`accel-plugin-<name>`), in
/// running order: the built-in vendor plugins, then the external ones by name, then the generic
/// PCI fallback (so an external plugin claims its devices before the fallback does). The
/// warnings name plugins that were skipped.
pub fn plugins_with_external(options: &ExecOptions) -> (Vec<Box<dyn Vendor>>, Vec<Warning>) {
    let mut plugins = default_plugins();
    let reserved: Vec<&str> = plugins.iter().map(|p| p.id()).collect();
    let (external, warnings) = crate::exec::find(options, &reserved);
    let generic = plugins.pop().expect("the generic plugin is last");
    plugins.extend(external.into_iter().map(|p| Box::new(p) as Box<dyn Vendor>));
    plugins.push(generic);
    (plugins, warnings)
}
