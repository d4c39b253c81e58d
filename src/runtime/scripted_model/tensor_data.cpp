// The captured model's data: the user's torch.save'd tensors, or synthetic ones of the example shapes.
#include "scripted_model/tensor_data.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/serialize.h>

#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"

namespace flexpipe::runtime {

namespace {

std::string shape_text(at::IntArrayRef shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// `value`'s shape past dimension 0 and kind against the spec, whose dimension 0 is the micro-batch.
at::Tensor checked(const std::string& path, const std::string& what, const at::Tensor& value, const TensorSpec& spec) {
  const std::vector<int64_t> sample(spec.shape.begin() + (spec.shape.empty() ? 0 : 1), spec.shape.end());
  if (spec.shape.empty() || value.dim() != static_cast<int64_t>(spec.shape.size()) ||
      !value.sizes().slice(1).equals(sample) || value.size(0) < 1)
    throw Error(fmt::format("{}: {} has shape {}; the model takes samples of shape {} along dimension 0 (N x {})", path,
                            what, shape_text(value.sizes()), shape_text(sample), fmt::join(sample, " x ")));
  if (at::isFloatingType(value.scalar_type()) != is_floating(spec.dtype))
    throw Error(fmt::format("{}: {} holds {} but the model takes {}", path, what, c10::toString(value.scalar_type()),
                            c10::toString(scalar_type(spec.dtype))));
  return value.to(scalar_type(spec.dtype)).contiguous();
}

// The data's inputs given as a dict by forward's argument names (transformers' input_ids, attention_mask),
// in the manifest's order: every name the model takes, and no other.
std::vector<at::Tensor> named_inputs(const std::string& path, const c10::Dict<c10::IValue, c10::IValue>& given,
                                     const std::vector<TensorSpec>& specs) {
  std::vector<std::string> names;
  for (const TensorSpec& spec : specs) names.push_back(spec.name);
  std::vector<at::Tensor> found;
  for (const TensorSpec& spec : specs) {
    const auto at = std::find_if(given.begin(), given.end(), [&](const auto& e) {
      return e.key().isString() && e.key().toStringRef() == spec.name;
    });
    if (at == given.end())
      throw Error(
          fmt::format("{}: \"inputs\" has no '{}'; the model takes {}", path, spec.name, fmt::join(names, ", ")));
    if (!at->value().isTensor())
      throw Error(fmt::format("{}: \"inputs\"['{}'] is a {}, not a Tensor", path, spec.name, at->value().tagKind()));
    found.push_back(at->value().toTensor());
  }
  for (const auto& e : given)
    if (!e.key().isString() || std::find(names.begin(), names.end(), e.key().toStringRef()) == names.end())
      throw Error(fmt::format("{}: \"inputs\" has {}, which the model does not take; it takes {}", path,
                              e.key().isString() ? "'" + e.key().toStringRef() + "'" : "a key that is not a string",
                              fmt::join(names, ", ")));
  return found;
}

}  // namespace

TensorData TensorData::synthetic(const ExportManifest& manifest, uint64_t seed) {
  TensorData d;
  d.inputs_ = manifest.inputs;
  d.target_ = manifest.loss.target;
  d.loss_ = manifest.loss.kind;
  d.seed_ = seed;
  d.microbatch_ = manifest.inputs.empty() || manifest.inputs[0].shape.empty() ? 1 : manifest.inputs[0].shape[0];
  for (const TensorSpec& out : manifest.outputs)
    if (!manifest.loss.inputs.empty() && out.name == manifest.loss.inputs[0] && !out.shape.empty())
      d.classes_ = out.shape.back();
  d.description_ = "synthetic tensors";
  return d;
}

TensorData TensorData::from_file(const std::string& path, const ExportManifest& manifest) {
  TensorData d = synthetic(manifest, 0);
  const std::string bytes = read_text_file(path);
  c10::IValue value;
  try {
    value = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const std::exception& e) {
    std::string what = e.what();
    throw Error(fmt::format("{}: not a file torch.save wrote: {}", path, what.substr(0, what.find('\n'))));
  }
  if (!value.isGenericDict())
    throw Error(fmt::format("{}: holds a {}, not a dict {{\"inputs\": ..., \"targets\": ...}}", path, value.tagKind()));
  const c10::Dict<c10::IValue, c10::IValue> dict = value.toGenericDict();
  auto entry = [&](const std::string& key) -> std::optional<c10::IValue> {
    for (const auto& e : dict)
      if (e.key().isString() && e.key().toStringRef() == key) return e.value();
    return std::nullopt;
  };
  const std::optional<c10::IValue> inputs = entry("inputs");
  if (!inputs)
    throw Error(fmt::format(
        "{}: no \"inputs\" (a Tensor, a list of Tensors in forward's order, or a dict of them by forward's argument names)",
        path));
  std::vector<at::Tensor> given;
  if (inputs->isTensor()) {
    given.push_back(inputs->toTensor());
  } else if (inputs->isList() || inputs->isTuple()) {
    const std::vector<c10::IValue> items =
        inputs->isList() ? inputs->toListRef().vec() : inputs->toTupleRef().elements().vec();
    for (const c10::IValue& item : items) {
      if (!item.isTensor()) throw Error(fmt::format("{}: \"inputs\" holds a {}, not a Tensor", path, item.tagKind()));
      given.push_back(item.toTensor());
    }
  } else if (inputs->isGenericDict()) {
    given = named_inputs(path, inputs->toGenericDict(), manifest.inputs);
  } else {
    throw Error(fmt::format("{}: \"inputs\" is a {}, not a Tensor, a list of Tensors or a dict of them by name", path,
                            inputs->tagKind()));
  }
  if (given.size() != manifest.inputs.size())
    throw Error(fmt::format("{}: {} input tensors, the model takes {}", path, given.size(), manifest.inputs.size()));
  int64_t samples = -1;
  for (size_t i = 0; i < given.size(); ++i) {
    d.samples_.push_back(
        checked(path, fmt::format("inputs[{}] ({})", i, manifest.inputs[i].name), given[i], manifest.inputs[i]));
    if (samples >= 0 && d.samples_.back().size(0) != samples)
      throw Error(
          fmt::format("{}: inputs[{}] has {} samples, inputs[0] {}", path, i, d.samples_.back().size(0), samples));
    samples = d.samples_.back().size(0);
  }
  const std::optional<c10::IValue> targets = entry("targets");
  if (manifest.loss.target) {
    if (!targets || !targets->isTensor())
      throw Error(fmt::format("{}: no \"targets\" Tensor, which the {} loss needs", path, manifest.loss.kind));
    d.targets_ = checked(path, "targets", targets->toTensor(), *manifest.loss.target);
    if (d.targets_.size(0) != samples)
      throw Error(fmt::format("{}: {} targets for {} samples", path, d.targets_.size(0), samples));
  }
  d.description_ = fmt::format("{} ({} samples)", path, samples);
  return d;
}

std::vector<MicroBatchData> TensorData::batch(int step, int first, int count, int per_step) const {
  std::vector<MicroBatchData> result;
  for (int j = first; j < first + count; ++j) {
    MicroBatchData mb;
    if (!samples_.empty()) {
      const int64_t n = samples_[0].size(0);
      const int64_t start = (int64_t(step) * per_step + j) * microbatch_;
      const at::Tensor rows = at::remainder(at::arange(start, start + microbatch_, at::kLong), n);
      for (const at::Tensor& s : samples_) mb.inputs.push_back(s.index_select(0, rows));
      if (targets_.defined()) mb.targets = targets_.index_select(0, rows);
    } else {
      at::Generator generator =
          at::make_generator<at::CPUGeneratorImpl>(seed_ * 1000003u + uint64_t(step) * 65537u + j);
      for (const TensorSpec& in : inputs_)
        mb.inputs.push_back(
            is_floating(in.dtype)
                ? at::randn(in.shape, generator, at::TensorOptions().dtype(scalar_type(in.dtype)))
                : at::randint(0, 2, in.shape, generator, at::TensorOptions().dtype(scalar_type(in.dtype))));
      if (target_)
        mb.targets = loss_ == "cross_entropy"
                         ? at::randint(0, std::max<int64_t>(classes_, 1), target_->shape, generator,
                                       at::TensorOptions().dtype(scalar_type(target_->dtype)))
                         : at::randn(target_->shape, generator, at::TensorOptions().dtype(scalar_type(target_->dtype)));
    }
    result.push_back(std::move(mb));
  }
  return result;
}

}  // namespace flexpipe::runtime
