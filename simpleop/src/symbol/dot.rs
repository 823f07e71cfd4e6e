//! Graphviz DOT export.
//!
//! Variables are ellipses, ops boxes labelled with the node name, the op
//! and its attributes. With a plan, every node also shows its shape, dtype
//! and buffer; nodes written in place are filled, and a legend lists which
//! values share each planned buffer.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::graph::Graph;
use super::steps::{Loc, Plan, Step, backward_chains};
use crate::{DType, Shape};

pub(crate) struct Planned<'a> {
    pub(crate) shapes: &'a [Shape],
    pub(crate) dtypes: &'a [DType],
    pub(crate) plan: &'a Plan,
    /// Fusion groups (node indices) and their pattern names.
    pub(crate) groups: &'a [(Vec<usize>, &'static str)],
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

fn loc_name(loc: Loc) -> String {
    match loc {
        Loc::Unplaced => "unplaced".into(),
        Loc::Arg(_) => "argument".into(),
        Loc::Aux(_) => "aux state".into(),
        Loc::ArgGrad(_) => "gradient buffer".into(),
        Loc::Head(h) => format!("output {h}"),
        Loc::HeadGrad(h) => format!("head gradient {h}"),
        Loc::Pool(b) => format!("buf {b}"),
        Loc::Fused => "fused, no buffer".into(),
        Loc::Discard => "unread, no buffer".into(),
    }
}

pub(crate) fn write(g: &Graph, planned: Option<Planned<'_>>) -> String {
    let mut out =
        String::from("digraph simpleop {\n  rankdir=BT;\n  node [fontname=\"monospace\"];\n");
    write_nodes(&mut out, g, planned.as_ref());
    if let Some(p) = &planned {
        write_groups(&mut out, p);
        write_backward_chains(&mut out, g, p);
    }
    for (h, &n) in g.heads.iter().enumerate() {
        let _ = writeln!(
            out,
            "  out{h} [label=\"output {h}\", shape=plaintext];\n  n{n} -> out{h};"
        );
    }
    if let Some(p) = &planned {
        write_legend(&mut out, g, p);
    }
    out.push_str("}\n");
    out
}

/// Per node, whether its forward step writes in place.
fn forward_in_place(g: &Graph, planned: Option<&Planned<'_>>) -> Vec<bool> {
    let mut v = vec![false; g.nodes.len()];
    for s in planned.iter().flat_map(|p| &p.plan.steps) {
        if let Step::Forward {
            node,
            in_place: true,
            ..
        } = s
        {
            v[*node] = true;
        }
    }
    v
}

/// Every node, with its label and style, and the edges from its inputs.
fn write_nodes(out: &mut String, g: &Graph, planned: Option<&Planned<'_>>) {
    let in_place = forward_in_place(g, planned);
    for (n, node) in g.nodes.iter().enumerate() {
        let mut label = escape(&node.name);
        if let Some(op) = node.op {
            let _ = write!(label, "\\n{}", escape(op.name));
            for (k, v) in node.attrs.arguments() {
                let _ = write!(label, "\\n{}={}", escape(k), escape(v));
            }
        }
        if let Some(p) = planned {
            let _ = write!(label, "\\n{} {}", p.shapes[n], p.dtypes[n]);
            let loc = p.plan.values[p.plan.forward_value[n]].loc;
            let _ = write!(
                label,
                "\\n[{}{}]",
                loc_name(loc),
                if in_place[n] { ", in place" } else { "" }
            );
        }
        let style = match (node.op, in_place[n]) {
            (None, _) => "shape=ellipse".to_owned(),
            (Some(_), true) => "shape=box, style=filled, fillcolor=\"#d8ecff\"".to_owned(),
            (Some(_), false) => "shape=box".to_owned(),
        };
        let _ = writeln!(out, "  n{n} [label=\"{label}\", {style}];");
        for &i in &node.inputs {
            let _ = writeln!(out, "  n{i} -> n{n};");
        }
    }
}

/// One cluster per fusion group.
fn write_groups(out: &mut String, p: &Planned<'_>) {
    for (i, (members, pattern)) in p.groups.iter().enumerate() {
        let _ = writeln!(
            out,
            "  subgraph cluster_{i} {{\n    label=\"fused group {i} ({pattern})\";\n    style=dashed;"
        );
        for &n in members {
            let _ = writeln!(out, "    n{n};");
        }
        out.push_str("  }\n");
    }
}

/// Fused gradient chains: one cluster each, the gradient steps in the
/// order they run, each linked to its forward node.
fn write_backward_chains(out: &mut String, g: &Graph, p: &Planned<'_>) {
    for (i, chain) in backward_chains(p.plan).enumerate() {
        let _ = writeln!(
            out,
            "  subgraph cluster_backward_{i} {{\n    label=\"fused backward group {i}\";\n    style=dotted;"
        );
        for (k, &n) in chain.iter().enumerate() {
            let _ = writeln!(
                out,
                "    b{i}_{k} [label=\"d{}\", shape=box, style=rounded];",
                escape(&g.nodes[n].name)
            );
        }
        out.push_str("  }\n");
        for (k, &n) in chain.iter().enumerate() {
            if k > 0 {
                let _ = writeln!(out, "  b{i}_{} -> b{i}_{k};", k - 1);
            }
            let _ = writeln!(out, "  n{n} -> b{i}_{k} [style=dotted, arrowhead=none];");
        }
    }
}

/// The memory figures, and which values share each planned buffer,
/// forward and gradient.
fn write_legend(out: &mut String, g: &Graph, p: &Planned<'_>) {
    let mut shared: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (n, node) in g.nodes.iter().enumerate() {
        if let Loc::Pool(b) = p.plan.values[p.plan.forward_value[n]].loc {
            shared.entry(b).or_default().push(node.name.clone());
        }
        if let Some(v) = p.plan.grad_value[n]
            && let Loc::Pool(b) = p.plan.values[v].loc
        {
            shared.entry(b).or_default().push(format!("d{}", node.name));
        }
    }
    let mut legend = format!(
        "memory: {} bytes planned, {} unplanned, {} in-place writes, {} values ({} bytes) fused away",
        p.plan.stats.planned_bytes,
        p.plan.stats.unplanned_bytes,
        p.plan.stats.inplace_writes,
        p.plan.stats.fused_values,
        p.plan.stats.fused_bytes
    );
    for (b, names) in &shared {
        let _ = write!(
            legend,
            "\\lbuf {b} ({} bytes): {}",
            p.plan.buffers[*b],
            escape(&names.join(", "))
        );
    }
    let _ = writeln!(out, "  legend [shape=note, label=\"{legend}\\l\"];");
}
