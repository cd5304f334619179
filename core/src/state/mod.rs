//! Training state on disk: parameters, AdamW moments, step and seed, in one safetensors file.
//!
//! Parameters keep their dtype; moments are f64, so a run resumed from a file continues
//! bit-exactly. Writes go to a temporary file beside the target and are renamed over it only
//! once complete, so an interrupted save never leaves a partial file in place of the previous
//! one (`file.rs`: links followed, special files refused, nothing left behind on failure).

mod file;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::host::{HostData, HostTensor};
use crate::model::Params;
use crate::optim::{AdamW, Layout};
use safetensors::tensor::{Dtype as StDtype, TensorView};
use safetensors::SafeTensors;
use std::collections::HashMap;
use std::path::Path;

const FORMAT: &str = "remat.train_state";

/// Where a run is: the step to run next and the seed it draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Steps completed.
    pub step: u64,
    /// The run's seed.
    pub seed: u64,
}

/// Saves `params`, `opt` and `progress` to `path` atomically: written to a new temporary file
/// beside the target, synced, then renamed over it (and the directory synced).
///
/// A symbolic link at `path` is followed: the file it names is replaced and the link stays. A
/// directory, FIFO, device or socket at `path` is refused with an error naming it. On any error
/// the previous file is untouched and no temporary file is left.
pub fn save_state(path: &Path, params: &Params, opt: &AdamW, progress: Progress) -> Result<()> {
    let st_error =
        |source| Error::SafeTensors { path: path.display().to_string(), what: "cannot encode the state", source };
    // Tensors are stored by parameter name: two parameters of one name could not be told apart.
    let mut names = std::collections::HashSet::new();
    if let Some(twice) = params.names().iter().find(|n| !names.insert(n.as_str())) {
        return Err(Error::Feed {
            what: "param",
            name: twice.clone(),
            message: "two parameters have this name: a training state stores them by name".into(),
        });
    }
    let mut bytes_store: Vec<(String, StDtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (i, (name, value)) in params.names().iter().zip(params.values()).enumerate() {
        bytes_store.push((
            format!("param/{name}"),
            st_dtype(value.dtype()),
            value.shape().to_vec(),
            to_bytes(value.data()),
        ));
        // Before the first step the optimizer has no moments yet: they are zeros.
        let zeros = vec![0.0; value.numel()];
        if !opt.m.is_empty() {
            opt.layout.check(params, "the AdamW state")?;
        }
        for (kind, moment) in [("m", opt.m.get(i).unwrap_or(&zeros)), ("v", opt.v.get(i).unwrap_or(&zeros))] {
            let data = HostData::F64(moment.clone());
            bytes_store.push((format!("adamw.{kind}/{name}"), StDtype::F64, value.shape().to_vec(), to_bytes(&data)));
        }
    }
    let views: Vec<(String, TensorView<'_>)> = bytes_store
        .iter()
        .map(|(name, dtype, shape, data)| {
            TensorView::new(*dtype, shape.clone(), data).map(|v| (name.clone(), v)).map_err(st_error)
        })
        .collect::<Result<_>>()?;
    let metadata: HashMap<String, String> = [
        ("format", FORMAT.to_string()),
        ("step", progress.step.to_string()),
        ("seed", progress.seed.to_string()),
        ("adamw.t", opt.t.to_string()),
        ("adamw.lr", f64_bits(opt.lr)),
        ("adamw.beta1", f64_bits(opt.beta1)),
        ("adamw.beta2", f64_bits(opt.beta2)),
        ("adamw.eps", f64_bits(opt.eps)),
        ("adamw.weight_decay", f64_bits(opt.weight_decay)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let bytes = safetensors::serialize(views, Some(metadata)).map_err(st_error)?;
    file::replace(path, &bytes)
}

/// Loads a state saved by [`save_state`] into `params` (which must be of the same model) and
/// `opt`; returns the progress. A truncated, foreign or mismatched file is an error and
/// changes nothing.
pub fn load_state(path: &Path, params: &mut Params, opt: &mut AdamW) -> Result<Progress> {
    let bad = |message: String| Error::optimizer_state(format!("{}: {message}", path.display()));
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.display().to_string(),
        what: "cannot read",
        source,
    })?;
    let st = |what: &'static str| move |source| Error::SafeTensors { path: path.display().to_string(), what, source };
    let (_, header) = SafeTensors::read_metadata(&bytes).map_err(st("not a safetensors file"))?;
    let meta = header.metadata().clone().unwrap_or_default();
    if meta.get("format").map(String::as_str) != Some(FORMAT) {
        return Err(bad(format!("not a remat training state (format is {:?})", meta.get("format"))));
    }
    let tensors = SafeTensors::deserialize(&bytes).map_err(st("corrupt or truncated"))?;
    let number = |key: &str| -> Result<u64> {
        meta.get(key)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| bad(format!("metadata `{key}` missing or not a number")))
    };
    let float = |key: &str| -> Result<f64> { number(key).map(f64::from_bits) };
    let mut new_values = Vec::new();
    let (mut ms, mut vs) = (Vec::new(), Vec::new());
    for (name, current) in params.names().iter().zip(params.values()) {
        let value = read(&tensors, &format!("param/{name}"), current.shape(), current.dtype()).map_err(&bad)?;
        new_values.push(value);
        for (kind, store) in [("m", &mut ms), ("v", &mut vs)] {
            let t = read(&tensors, &format!("adamw.{kind}/{name}"), current.shape(), DType::F64).map_err(&bad)?;
            store.push(t.to_f64_vec());
        }
    }
    let expected = 3 * params.len();
    if tensors.len() != expected {
        return Err(bad(format!("holds {} tensors, this model's state has {expected}", tensors.len())));
    }
    let progress = Progress { step: number("step")?, seed: number("seed")? };
    let restored = AdamW {
        lr: float("adamw.lr")?,
        beta1: float("adamw.beta1")?,
        beta2: float("adamw.beta2")?,
        eps: float("adamw.eps")?,
        weight_decay: float("adamw.weight_decay")?,
        t: number("adamw.t")?,
        m: ms,
        v: vs,
        layout: Layout::of(params),
    };
    restored.validate().map_err(|e| bad(e.to_string()))?;
    if restored.t == u64::MAX {
        return Err(bad(format!("metadata `adamw.t` is {}: no step can follow it", restored.t)));
    }
    for (value, name) in new_values.into_iter().zip(params.names().to_vec()) {
        params.set(&name, value)?;
    }
    *opt = restored;
    Ok(progress)
}

fn read(
    tensors: &SafeTensors<'_>,
    name: &str,
    shape: &[usize],
    dtype: DType,
) -> std::result::Result<HostTensor, String> {
    let view = tensors.tensor(name).map_err(|_| format!("tensor `{name}` missing"))?;
    if view.shape() != shape || view.dtype() != st_dtype(dtype) {
        return Err(format!(
            "tensor `{name}` is {} {}, the model expects {} {dtype}",
            crate::shape::fmt_shape(view.shape()),
            // safetensors spells dtypes `F32`, `BF16`: remat's spelling is lowercase.
            format!("{:?}", view.dtype()).to_lowercase(),
            crate::shape::fmt_shape(shape),
        ));
    }
    HostTensor::new(shape.to_vec(), from_bytes(view.data(), dtype)).map_err(|e| e.to_string())
}

fn f64_bits(x: f64) -> String {
    x.to_bits().to_string()
}

fn st_dtype(d: DType) -> StDtype {
    match d {
        DType::F32 => StDtype::F32,
        DType::F64 => StDtype::F64,
        DType::BF16 => StDtype::BF16,
        DType::F16 => StDtype::F16,
        DType::F8E4M3 => StDtype::F8_E4M3,
        DType::F8E5M2 => StDtype::F8_E5M2,
        DType::I64 => StDtype::I64,
        DType::I32 => StDtype::I32,
        DType::Bool => StDtype::BOOL,
    }
}

fn to_bytes(data: &HostData) -> Vec<u8> {
    match data {
        HostData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        HostData::F64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        HostData::BF16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        HostData::F16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        HostData::F8E4M3(v) | HostData::F8E5M2(v) => v.clone(),
        HostData::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        HostData::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        HostData::Bool(v) => v.iter().map(|&b| u8::from(b)).collect(),
    }
}

fn from_bytes(bytes: &[u8], dtype: DType) -> HostData {
    fn chunks<const N: usize, T>(bytes: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
        bytes.chunks_exact(N).map(|c| f(c.try_into().expect("chunks_exact yields N bytes"))).collect()
    }
    match dtype {
        DType::F32 => HostData::F32(chunks(bytes, f32::from_le_bytes)),
        DType::F64 => HostData::F64(chunks(bytes, f64::from_le_bytes)),
        DType::BF16 => HostData::BF16(chunks(bytes, half::bf16::from_le_bytes)),
        DType::F16 => HostData::F16(chunks(bytes, half::f16::from_le_bytes)),
        DType::F8E4M3 => HostData::F8E4M3(bytes.to_vec()),
        DType::F8E5M2 => HostData::F8E5M2(bytes.to_vec()),
        DType::I64 => HostData::I64(chunks(bytes, i64::from_le_bytes)),
        DType::I32 => HostData::I32(chunks(bytes, i32::from_le_bytes)),
        DType::Bool => HostData::Bool(bytes.iter().map(|&b| b != 0).collect()),
    }
}
