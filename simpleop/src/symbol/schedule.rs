//! Pass 1, the schedule: forward steps in graph order, then, in training,
//! the backward steps built from each op's registered gradient.
//!
//! Every array the graph produces is a *value*. Forward values are op
//! outputs; gradient values are the gradients of op outputs. Arguments,
//! the user's gradient buffers, the outputs and the head gradients live in
//! arrays the executor owns or borrows; everything else is left for
//! [`super::allocate`].
//!
//! Backward is built from each op's registered gradient. Its [`GradSpec`]
//! says what the gradient reads, and only that is kept alive past the
//! forward pass. A value used several times receives its gradients as one
//! `WriteTo` followed by `AddTo` writes into the same buffer; no add nodes.
//!
//! [`GradSpec`]: crate::GradSpec

use crate::{Error, OpReqType, Result};

use super::config::{GradReq, MemoryStats};
use super::graph::Graph;
use super::steps::{Loc, Plan, PlanInput, SinkLayout, Step, Value, ValueId, splits};

/// The sink every backward step of `steps` fits in.
fn sink_layout(steps: &[Step], g: &Graph, p: &PlanInput<'_>) -> SinkLayout {
    let mut sink = SinkLayout::default();
    for s in steps {
        let Step::Backward { node, grads, .. } = s else {
            continue;
        };
        let node = &g.nodes[*node];
        let inputs = &node.inputs[..node.num_args()];
        sink.slots = sink.slots.max(inputs.len());
        let split = splits(grads);
        for (&src, grad) in inputs.iter().zip(grads) {
            if split || grad.is_none() {
                let bytes = p.shapes[src].size().saturating_mul(p.dtypes[src].size());
                sink.slot_bytes = sink.slot_bytes.max(bytes.next_multiple_of(64));
            }
        }
    }
    sink
}

/// The forward steps, then (in training) the backward steps; every value
/// not bound to an array is left [`Loc::Unplaced`].
pub(crate) fn schedule(p: &PlanInput<'_>) -> Result<Plan> {
    let g = p.graph;
    let n_nodes = g.nodes.len();
    let mut values: Vec<Value> = Vec::new();
    let new_value = |values: &mut Vec<Value>, n: usize, loc: Loc| {
        values.push(Value {
            shape: p.shapes[n].clone(),
            dtype: p.dtypes[n],
            loc,
        });
        values.len() - 1
    };
    // Forward values: arguments in place, heads in the output arrays.
    let arg_index = index_of(&g.args, n_nodes);
    let aux_index = index_of(&g.aux, n_nodes);
    let heads = head_refs(g);
    let mut forward_value = Vec::with_capacity(n_nodes);
    for n in 0..n_nodes {
        let loc = match (arg_index[n], aux_index[n], heads[n].first()) {
            (Some(k), _, _) => Loc::Arg(k),
            (_, Some(k), _) => Loc::Aux(k),
            (_, _, Some(&h)) => Loc::Head(h),
            _ => Loc::Unplaced,
        };
        forward_value.push(new_value(&mut values, n, loc));
    }
    let mut steps: Vec<Step> = g
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, node)| node.op.is_some())
        .map(|(n, node)| {
            let (args, aux) = node.inputs.split_at(node.num_args());
            Step::Forward {
                node: n,
                inputs: args.iter().map(|&i| forward_value[i]).collect(),
                out: forward_value[n],
                more_outs: node
                    .more_outputs
                    .iter()
                    .map(|&o| (forward_value[o], OpReqType::WriteTo))
                    .collect(),
                aux: aux.iter().map(|&i| forward_value[i]).collect(),
                in_place: false,
            }
        })
        .collect();
    let backward_start = steps.len();
    let mut grad_value: Vec<Option<ValueId>> = vec![None; n_nodes];
    if p.train {
        backward_steps(
            p,
            &arg_index,
            &forward_value,
            &mut grad_value,
            &mut values,
            &mut steps,
        )?;
    }
    skip_unread_outputs(&mut steps, &mut values);
    let sink = sink_layout(&steps, g, p);
    let plan = Plan {
        values,
        steps,
        buffers: Vec::new(),
        sink,
        forward_value,
        grad_value,
        backward_start,
        stats: MemoryStats::default(),
    };
    Ok(plan)
}

fn backward_steps(
    p: &PlanInput<'_>,
    arg_index: &[Option<usize>],
    forward_value: &[ValueId],
    grad_value: &mut [Option<ValueId>],
    values: &mut Vec<Value>,
    steps: &mut Vec<Step>,
) -> Result<()> {
    let g = p.graph;
    let needs = gradient_needs(p, arg_index)?;
    gradient_values(p, arg_index, &needs, grad_value, values);
    // Contributions made so far to each node's gradient.
    let mut written = vec![0usize; g.nodes.len()];
    let req_for = |n: usize, written: &mut [usize]| -> OpReqType {
        let first = written[n] == 0;
        written[n] += 1;
        let add = match arg_index[n] {
            Some(k) => p.grad_req[k] == GradReq::Add,
            None => false,
        };
        if add || !first {
            OpReqType::AddTo
        } else {
            OpReqType::WriteTo
        }
    };
    for (h, &n) in g.heads.iter().enumerate() {
        let Some(dst) = grad_value[n] else { continue };
        if values[dst].loc == Loc::HeadGrad(h) {
            continue;
        }
        let req = req_for(n, &mut written);
        steps.push(Step::Seed { head: h, dst, req });
    }
    for n in (0..g.nodes.len()).rev() {
        let node = &g.nodes[n];
        let Some(op) = node.op else { continue };
        if !needs[n] {
            continue;
        }
        let spec = op.gradient.expect("checked above");
        let args = &node.inputs[..node.num_args()];
        let grads = args
            .iter()
            .map(|&i| grad_value[i].map(|v| (v, req_for(i, &mut written))))
            .collect();
        let more = &node.more_outputs;
        steps.push(Step::Backward {
            node: n,
            out_grad: grad_value[n],
            more_out_grads: more.iter().map(|&o| grad_value[o]).collect(),
            output: spec.needs_output.then_some(forward_value[n]),
            more_outputs: match spec.needs_output {
                true => more.iter().map(|&o| forward_value[o]).collect(),
                false => Vec::new(),
            },
            inputs: args
                .iter()
                .enumerate()
                .map(|(i, &src)| spec.needs_input(i).then_some(forward_value[src]))
                .collect(),
            grads,
            in_place: false,
        });
    }
    Ok(())
}

/// Which node outputs need a gradient: those with a path to an argument
/// asking for one. An error when such a gradient would flow through an op
/// without one, or start at a head of an integer dtype.
fn gradient_needs(p: &PlanInput<'_>, arg_index: &[Option<usize>]) -> Result<Vec<bool>> {
    let g = p.graph;
    let mut needs = vec![false; g.nodes.len()];
    for (n, node) in g.nodes.iter().enumerate() {
        needs[n] = match arg_index[n] {
            Some(k) => p.grad_req[k] != GradReq::Null,
            None => node.inputs.iter().any(|&i| needs[i]),
        };
        if needs[n]
            && let Some(op) = node.op
            && op.gradient.is_none()
        {
            {
                let above = ancestors(g, n);
                let wanted = g
                    .args
                    .iter()
                    .enumerate()
                    .find(|&(k, &a)| p.grad_req[k] != GradReq::Null && above[a])
                    .map(|(_, &a)| g.nodes[a].name.as_str())
                    .unwrap_or("an argument");
                return Err(node.error(Error::invalid(
                    op.name,
                    "grad_req",
                    format!(
                        "`{wanted}` asks for a gradient that flows through this op, which has none; set its grad_req to null"
                    ),
                )));
            }
        }
    }
    for (h, &n) in g.heads.iter().enumerate() {
        if needs[n] && !p.dtypes[n].is_float() {
            return Err(g.nodes[n].error(Error::invalid(
                g.nodes[n].op_name(),
                "output",
                format!(
                    "head {h} has dtype {}, gradients need a float dtype",
                    p.dtypes[n]
                ),
            )));
        }
    }
    Ok(needs)
}

/// Adds a gradient value for each node in `needs` that receives one (an
/// output nothing reads gets none: its op sees a zero gradient): the
/// user's buffer for an argument; a head gradient read directly when it
/// is the only contribution; planned otherwise.
fn gradient_values(
    p: &PlanInput<'_>,
    arg_index: &[Option<usize>],
    needs: &[bool],
    grad_value: &mut [Option<ValueId>],
    values: &mut Vec<Value>,
) {
    let g = p.graph;
    let consumers = g.consumers();
    let heads_of = head_refs(g);
    for n in (0..g.nodes.len()).filter(|&n| needs[n]) {
        // An op's output nodes are not readers of its output 0.
        let readers = consumers[n]
            .iter()
            .filter(|&&c| !g.nodes[c].is_output())
            .count();
        let loc = match arg_index[n] {
            Some(k) => Loc::ArgGrad(k),
            None if readers == 0 && heads_of[n].is_empty() => continue,
            None => match heads_of[n].as_slice() {
                [h] if readers == 0 => Loc::HeadGrad(*h),
                _ => Loc::Unplaced,
            },
        };
        values.push(Value {
            shape: p.shapes[n].clone(),
            dtype: p.dtypes[n],
            loc,
        });
        grad_value[n] = Some(values.len() - 1);
    }
}

/// Per node, the heads (output indices) it is, in order.
fn head_refs(g: &Graph) -> Vec<Vec<usize>> {
    let mut refs = vec![Vec::new(); g.nodes.len()];
    for (h, &n) in g.heads.iter().enumerate() {
        refs[n].push(h);
    }
    refs
}

/// Per node, whether it is an ancestor of (or is) node `to`.
fn ancestors(g: &Graph, to: usize) -> Vec<bool> {
    let mut seen = vec![false; g.nodes.len()];
    let mut stack = vec![to];
    while let Some(n) = stack.pop() {
        if !std::mem::replace(&mut seen[n], true) {
            stack.extend(&g.nodes[n].inputs);
        }
    }
    seen
}

/// Per node, its position in `list` (the arguments, the aux states).
fn index_of(list: &[usize], n_nodes: usize) -> Vec<Option<usize>> {
    let mut v = vec![None; n_nodes];
    for (k, &a) in list.iter().enumerate() {
        v[a] = Some(k);
    }
    v
}

/// Outputs 1.. that no step reads and no head is get a `Null` request
/// and no buffer: the op need not compute them (Dropout's mask in
/// inference).
fn skip_unread_outputs(steps: &mut [Step], values: &mut [Value]) {
    let mut read = vec![false; values.len()];
    for s in steps.iter() {
        for v in s.reads() {
            read[v] = true;
        }
    }
    for s in steps.iter_mut() {
        if let Step::Forward { more_outs, .. } = s {
            for (v, req) in more_outs.iter_mut() {
                if !read[*v] && values[*v].loc == Loc::Unplaced {
                    *req = OpReqType::Null;
                    values[*v].loc = Loc::Discard;
                }
            }
        }
    }
}
