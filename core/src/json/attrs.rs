//! Op attributes in `remat.graph` nodes: `{"axes": [1], "keepdim": true}` and so on.
//!
//! Reading and writing are exhaustive matches over the op kinds, like the rest of remat, so a
//! kind added to the catalog cannot be forgotten here.

use crate::dtype::DType;
use crate::host::{HostData, HostTensor};
use crate::op::{AttnLayout, Init, Member, Op, OpKind, OtherKind};
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};
use std::sync::Arc;

type Res<T> = std::result::Result<T, String>;

/// The attributes of one node being read; remembers which keys were used.
struct Attrs<'a> {
    map: &'a Map<String, Value>,
    known: Vec<&'static str>,
}

impl<'a> Attrs<'a> {
    fn optional<T: DeserializeOwned>(&mut self, key: &'static str) -> Res<Option<T>> {
        self.known.push(key);
        match self.map.get(key) {
            None => Ok(None),
            Some(v) => serde_json::from_value(v.clone()).map(Some).map_err(|e| format!("attribute `{key}`: {e}")),
        }
    }

    fn required<T: DeserializeOwned>(&mut self, key: &'static str) -> Res<T> {
        self.optional(key)?.ok_or_else(|| {
            // A misspelt key is the likeliest cause: name it.
            match self.map.keys().find(|k| remat_catalog::closest(k, [key]).is_some()) {
                Some(k) => format!("missing attribute `{key}` (found `{k}`: did you mean `{key}`?)"),
                None => format!("missing attribute `{key}`"),
            }
        })
    }

    /// A bound where `null` means unbounded.
    fn bound(&mut self, key: &'static str, unbounded: f64) -> Res<f64> {
        if self.map.get(key) == Some(&Value::Null) {
            self.known.push(key);
            return Ok(unbounded);
        }
        self.required(key)
    }

    /// Rejects keys no rule asked for.
    fn finish(self, kind: OpKind) -> Res<()> {
        for key in self.map.keys() {
            if !self.known.contains(&key.as_str()) {
                let expected = if self.known.is_empty() {
                    format!("{kind} takes no attributes")
                } else {
                    let hint = remat_catalog::closest(key, self.known.iter().copied())
                        .map_or(String::new(), |c| format!("did you mean `{c}`? "));
                    format!("{hint}{kind} takes {}", self.known.join(", "))
                };
                return Err(format!("unknown attribute `{key}` ({expected})"));
            }
        }
        Ok(())
    }
}

/// The op of kind `kind` with the attributes of `map`; `id` is the node's id (a dropout's
/// default mask key).
pub(super) fn read(kind: OpKind, map: &Map<String, Value>, id: u32) -> Res<Op> {
    use OtherKind as K;
    let mut a = Attrs { map, known: Vec::new() };
    let other = match kind.member() {
        Member::UnaryOp(u) => return a.finish(kind).map(|()| Op::Unary(u)),
        Member::UnaryGradOp(u) => return a.finish(kind).map(|()| Op::UnaryGrad(u)),
        Member::BinaryOp(b) => return a.finish(kind).map(|()| Op::Binary(b)),
        Member::CompareOp(c) => return a.finish(kind).map(|()| Op::Compare(c)),
        Member::LogicOp(l) => return a.finish(kind).map(|()| Op::Logic(l)),
        Member::ArgReduceOp(op) => {
            let op = Op::ArgReduce { op, axis: a.required("axis")?, keepdim: a.optional("keepdim")?.unwrap_or(false) };
            return a.finish(kind).map(|()| op);
        }
        Member::ReduceOp(op) => {
            let op = Op::Reduce { op, axes: a.required("axes")?, keepdim: a.optional("keepdim")?.unwrap_or(false) };
            return a.finish(kind).map(|()| op);
        }
        Member::Other(other) => other,
    };
    let op = match other {
        K::Input => Op::Input,
        K::Param => Op::Param { init: a.optional::<Value>("init")?.map_or(Ok(Init::Auto), |v| init(&v))? },
        K::Constant => Op::Constant { value: a.required("value")? },
        K::ConstantData => {
            let values: Vec<f64> = a.required("values")?;
            Op::ConstantData {
                value: Arc::new(HostTensor::f64(vec![values.len()], values).map_err(|e| e.to_string())?),
            }
        }
        K::Arange => {
            Op::Arange { start: a.optional("start")?.unwrap_or(0.0), step: a.optional("step")?.unwrap_or(1.0) }
        }
        K::SoftmaxGrad => Op::SoftmaxGrad,
        K::LogSoftmaxGrad => Op::LogSoftmaxGrad,
        K::CrossEntropyGrad => Op::CrossEntropyGrad,
        K::Matmul => Op::Matmul,
        K::ScaledMatmul => Op::ScaledMatmul,
        K::Softmax => Op::Softmax,
        K::LogSoftmax => Op::LogSoftmax,
        K::CrossEntropy => Op::CrossEntropy,
        K::Embedding => Op::Embedding,
        K::Where => Op::Where,
        K::LogicalNot => Op::LogicalNot,
        K::Topk => {
            Op::Topk { k: a.required("k")?, axis: a.required("axis")?, largest: a.optional("largest")?.unwrap_or(true) }
        }
        K::Argsort => Op::Argsort { axis: a.required("axis")?, descending: a.optional("descending")?.unwrap_or(false) },
        K::Bincount => Op::Bincount { bins: a.required("bins")? },
        K::OneHot => Op::OneHot {
            classes: a.required("classes")?,
            dtype: a.optional::<String>("dtype")?.map_or(Ok(DType::I64), |d| super::parse_dtype(&d))?,
        },
        K::Cumsum => Op::Cumsum { axis: a.required("axis")?, reverse: a.optional("reverse")?.unwrap_or(false) },
        K::IndexAdd => Op::IndexAdd { axis: a.required("axis")? },
        K::ScatterAdd => Op::ScatterAdd { axis: a.required("axis")? },
        K::Pow => Op::Pow { exponent: a.required("exponent")? },
        K::IndexSelect => Op::IndexSelect { axis: a.required("axis")? },
        K::Gather => Op::Gather { axis: a.required("axis")? },
        K::GatherGrad => Op::GatherGrad { axis: a.required("axis")?, dim: a.required("dim")? },
        K::IndexSelectGrad => Op::IndexSelectGrad { axis: a.required("axis")?, dim: a.required("dim")? },
        K::SliceGrad => {
            Op::SliceGrad { axis: a.required("axis")?, start: a.required("start")?, dim: a.required("dim")? }
        }
        K::RmsNorm => Op::RmsNorm { eps: a.required("eps")? },
        K::RmsNormGrad => Op::RmsNormGrad { eps: a.required("eps")? },
        K::Sdpa => Op::Sdpa {
            causal: a.optional("causal")?.unwrap_or(false),
            scale: a.required("scale")?,
            layout: a.optional("layout")?.unwrap_or_default(),
        },
        K::SdpaGrad => Op::SdpaGrad {
            causal: a.optional("causal")?.unwrap_or(false),
            scale: a.required("scale")?,
            layout: a.optional("layout")?.unwrap_or_default(),
        },
        K::Clamp => Op::Clamp { min: a.bound("min", f64::NEG_INFINITY)?, max: a.bound("max", f64::INFINITY)? },
        K::ClampGrad => Op::ClampGrad { min: a.bound("min", f64::NEG_INFINITY)?, max: a.bound("max", f64::INFINITY)? },
        K::AmaxGrad => Op::AmaxGrad { axes: a.required("axes")?, keepdim: a.optional("keepdim")?.unwrap_or(false) },
        K::Reshape => Op::Reshape { shape: a.required("shape")? },
        K::Expand => Op::Expand { shape: a.required("shape")? },
        K::Transpose => Op::Transpose { perm: a.required("perm")? },
        K::Concat => Op::Concat { axis: a.required("axis")? },
        K::LayerNorm => Op::LayerNorm { eps: a.required("eps")? },
        K::LayerNormGrad => Op::LayerNormGrad { eps: a.required("eps")? },
        K::Cast => Op::Cast { dtype: super::parse_dtype(&a.required::<String>("dtype")?)? },
        K::Dropout => Op::Dropout {
            p: a.required("p")?,
            seed: a.optional("seed")?.unwrap_or(0),
            key: a.optional("key")?.unwrap_or(id as u64),
        },
        K::Slice => Op::Slice { axis: a.required("axis")?, start: a.required("start")?, len: a.required("len")? },
        K::EmbeddingGrad => Op::EmbeddingGrad { rows: a.required("rows")? },
        K::MatmulT => Op::MatmulT {
            ta: a.optional("ta")?.unwrap_or(false),
            tb: a.optional("tb")?.unwrap_or(false),
            fold: a.optional("fold")?.unwrap_or(false),
        },
    };
    a.finish(kind)?;
    Ok(op)
}

/// `"auto"`, `"zeros"`, `"ones"` or `{"normal": std}`.
fn init(v: &Value) -> Res<Init> {
    match v {
        Value::String(s) if s == "auto" => Ok(Init::Auto),
        Value::String(s) if s == "zeros" => Ok(Init::Zeros),
        Value::String(s) if s == "ones" => Ok(Init::Ones),
        Value::Object(m) if m.len() == 1 && m.get("normal").is_some_and(Value::is_number) => {
            Ok(Init::Normal(m["normal"].as_f64().unwrap_or(0.0)))
        }
        other => {
            Err(format!("attribute `init`: expected \"auto\", \"zeros\", \"ones\" or {{\"normal\": std}}, got {other}"))
        }
    }
}

/// `attrs` with `key: value` added unless `value` is the default.
fn with_flag(mut attrs: Value, key: &str, value: bool, default: bool) -> Value {
    if value != default {
        attrs[key] = json!(value);
    }
    attrs
}

/// A float as JSON; `null` for the unbounded ends of a clamp.
fn bound(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        Value::Null
    }
}

/// The attributes of `op` in canonical form (defaults omitted); `id` is the node's id.
pub(super) fn write(op: &Op, id: u32) -> Map<String, Value> {
    let v = match op {
        Op::Input
        | Op::Unary(_)
        | Op::Binary(_)
        | Op::Compare(_)
        | Op::Logic(_)
        | Op::LogicalNot
        | Op::Where
        | Op::UnaryGrad(_)
        | Op::SoftmaxGrad
        | Op::LogSoftmaxGrad
        | Op::CrossEntropyGrad
        | Op::Matmul
        | Op::ScaledMatmul
        | Op::Softmax
        | Op::LogSoftmax
        | Op::CrossEntropy
        | Op::Embedding => json!({}),
        Op::ConstantData { value } => json!({ "values": value.to_f64_vec() }),
        Op::Arange { start, step } => json!({"start": start, "step": step}),
        Op::Pow { exponent } => json!({ "exponent": exponent }),
        Op::IndexSelect { axis } | Op::Gather { axis } => json!({ "axis": axis }),
        Op::IndexAdd { axis } | Op::ScatterAdd { axis } => json!({ "axis": axis }),
        Op::ArgReduce { axis, keepdim, .. } => with_flag(json!({ "axis": axis }), "keepdim", *keepdim, false),
        Op::Topk { k, axis, largest } => with_flag(json!({"k": k, "axis": axis}), "largest", *largest, true),
        Op::Argsort { axis, descending } => with_flag(json!({ "axis": axis }), "descending", *descending, false),
        Op::Cumsum { axis, reverse } => with_flag(json!({ "axis": axis }), "reverse", *reverse, false),
        Op::Bincount { bins } => json!({ "bins": bins }),
        Op::OneHot { classes, dtype } => json!({"classes": classes, "dtype": DType::name(*dtype)}),
        Op::IndexSelectGrad { axis, dim } | Op::GatherGrad { axis, dim } => json!({"axis": axis, "dim": dim}),
        Op::SliceGrad { axis, start, dim } => json!({"axis": axis, "start": start, "dim": dim}),
        Op::RmsNorm { eps } | Op::RmsNormGrad { eps } => json!({ "eps": eps }),
        Op::Sdpa { causal, scale, layout } | Op::SdpaGrad { causal, scale, layout } => match layout {
            AttnLayout::HeadMajor => json!({"causal": causal, "scale": scale}),
            AttnLayout::TokenMajor => json!({"causal": causal, "scale": scale, "layout": layout}),
        },
        Op::Param { init } => match init {
            Init::Auto => json!({}),
            Init::Zeros => json!({"init": "zeros"}),
            Init::Ones => json!({"init": "ones"}),
            Init::Normal(std) => json!({"init": {"normal": std}}),
        },
        Op::Constant { value } => json!({ "value": value }),
        Op::Clamp { min, max } | Op::ClampGrad { min, max } => json!({"min": bound(*min), "max": bound(*max)}),
        Op::Reduce { axes, keepdim, .. } | Op::AmaxGrad { axes, keepdim } => {
            if *keepdim {
                json!({"axes": axes, "keepdim": true})
            } else {
                json!({ "axes": axes })
            }
        }
        Op::Reshape { shape } | Op::Expand { shape } => json!({ "shape": shape }),
        Op::Transpose { perm } => json!({ "perm": perm }),
        Op::Concat { axis } => json!({ "axis": axis }),
        Op::LayerNorm { eps } | Op::LayerNormGrad { eps } => json!({ "eps": eps }),
        Op::Cast { dtype } => json!({"dtype": DType::name(*dtype)}),
        Op::Dropout { p, seed, key } => {
            let mut m = json!({ "p": p });
            if *seed != 0 {
                m["seed"] = json!(seed);
            }
            if *key != id as u64 {
                m["key"] = json!(key);
            }
            m
        }
        Op::Slice { axis, start, len } => json!({"axis": axis, "start": start, "len": len}),
        Op::EmbeddingGrad { rows } => json!({ "rows": rows }),
        Op::MatmulT { ta, tb, fold } => {
            let mut m = Map::new();
            for (key, set) in [("ta", ta), ("tb", tb), ("fold", fold)] {
                if *set {
                    m.insert(key.into(), json!(true));
                }
            }
            Value::Object(m)
        }
    };
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// A `constant_data` op read from JSON holds its values flat in f64; this gives them the node's
/// shape and dtype (and checks the count). Other ops pass through.
pub(super) fn shape_data(op: Op, shape: &[usize], dtype: DType) -> Res<Op> {
    match op {
        Op::ConstantData { value } => {
            let flat = value.to_f64_vec();
            let t = HostTensor::new(shape.to_vec(), HostData::from_f64(&flat, dtype)).map_err(|e| e.to_string())?;
            Ok(Op::ConstantData { value: Arc::new(t) })
        }
        op => Ok(op),
    }
}
