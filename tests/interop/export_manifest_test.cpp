// The export manifest reader: what `flexpipe export` writes reads back field by field, and what no
// exporter writes is one error naming the file and the field.
#include "flexpipe/interop/export_manifest.h"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "error_text.h"

namespace flexpipe {
namespace {

// One chunk cut into a recomputed piece and a kept one, as `flexpipe export` writes it (trimmed).
const std::string kManifest = R"({"format": "flexpipe-export", "version": 1, "graph": "TinyUNet",
  "graph_operators": 4, "dtype": "float64",
  "inputs": [{"name": "x", "shape": [2, 3, 8, 8], "dtype": "float64", "model_input": true}],
  "outputs": [{"name": "out", "shape": [2, 2, 8, 8], "dtype": "float64"}],
  "chunks": [{"file": "stage_0.pt", "operators": 4, "first": "down1", "last": "out",
    "inputs": [{"name": "x", "shape": [2, 3, 8, 8], "dtype": "float64", "model_input": true}],
    "outputs": [{"name": "out", "shape": [2, 2, 8, 8], "dtype": "float64", "requires_grad": true}],
    "parameters": [{"name": "down1.weight", "shape": [8, 3, 3, 3], "dtype": "float64",
                    "state_dict": ["down1.weight"], "requires_grad": true}],
    "buffers": [{"name": "steps", "shape": [], "dtype": "int64", "state_dict": ["bn.num_batches_tracked"]}],
    "pieces": [
      {"file": "stage_0_piece_0.pt", "memory": "recompute", "first": "down1", "last": "relu",
       "inputs": [{"name": "x", "shape": [2, 3, 8, 8], "dtype": "float64"}],
       "outputs": [{"name": "relu", "shape": [2, 8, 8, 8], "dtype": "float64", "requires_grad": true}],
       "parameters": [{"name": "down1.weight", "shape": [8, 3, 3, 3], "dtype": "float64", "requires_grad": true}],
       "random": true},
      {"file": "stage_0_piece_1.pt", "memory": "keep", "first": "up1", "last": "out",
       "inputs": [{"name": "relu", "shape": [2, 8, 8, 8], "dtype": "float64", "requires_grad": true}],
       "outputs": [{"name": "out", "shape": [2, 2, 8, 8], "dtype": "float64", "requires_grad": true}],
       "parameters": [], "updates_buffers": true}]}],
  "loss": {"kind": "mse", "file": "loss.pt", "inputs": ["out"], "target": {"shape": [2, 2, 8, 8], "dtype": "float64"}}})";

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

std::string error_reading(const std::string& text) {
  return test::error_text([&] { parse_export_manifest(text, "out/manifest.json"); });
}

TEST(ExportManifest, ReadsChunksPiecesStateNamesAndTheLoss) {
  const ExportManifest m = parse_export_manifest(kManifest, "out/manifest.json");
  EXPECT_EQ(m.graph, "TinyUNet");
  EXPECT_EQ(m.graph_operators, 4);
  EXPECT_EQ(m.dtype, ElementType::Float64);
  ASSERT_EQ(m.inputs.size(), 1u);
  EXPECT_EQ(m.inputs[0].shape, (std::vector<int64_t>{2, 3, 8, 8}));
  EXPECT_TRUE(m.inputs[0].model_input);
  ASSERT_EQ(m.chunks.size(), 1u);
  const ChunkSpec& chunk = m.chunks[0];
  EXPECT_EQ(chunk.parameter_state_names, (std::vector<std::vector<std::string>>{{"down1.weight"}}));
  EXPECT_EQ(chunk.buffer_state_names, (std::vector<std::vector<std::string>>{{"bn.num_batches_tracked"}}));
  EXPECT_EQ(chunk.buffers[0].dtype, ElementType::Int64);
  EXPECT_TRUE(chunk.buffers[0].shape.empty());
  EXPECT_EQ(chunk.parameter_tied_chunks, (std::vector<std::vector<int>>{{}}));
  ASSERT_EQ(chunk.pieces.size(), 2u);
  EXPECT_EQ(chunk.pieces[0].memory, "recompute");
  EXPECT_TRUE(chunk.pieces[0].trains);  // it holds a parameter that takes gradients
  EXPECT_TRUE(chunk.pieces[0].random);
  EXPECT_FALSE(chunk.pieces[1].trains);
  EXPECT_TRUE(chunk.pieces[1].updates_buffers);
  EXPECT_FALSE(chunk.offloads);
  EXPECT_EQ(m.loss.inputs, (std::vector<std::string>{"out"}));
  ASSERT_TRUE(m.loss.target.has_value());
  EXPECT_EQ(m.loss.target->shape, (std::vector<int64_t>{2, 2, 8, 8}));
}

TEST(ExportManifest, AChunkWithoutPiecesIsOneWholePiece) {
  nlohmann::json j = nlohmann::json::parse(kManifest);
  j["chunks"][0].erase("pieces");
  const ExportManifest m = parse_export_manifest(j.dump(), "out/manifest.json");
  ASSERT_EQ(m.chunks[0].pieces.size(), 1u);
  const PieceSpec& whole = m.chunks[0].pieces[0];
  EXPECT_EQ(whole.file, "stage_0.pt");
  EXPECT_EQ(whole.memory, "keep");
  EXPECT_EQ(whole.first, "down1");
  EXPECT_TRUE(whole.trains);
}

TEST(ExportManifest, WhatNoExporterWritesIsOneErrorNamingTheField) {
  // Before the reader moved out of the runtime, a list where an object was expected (or the reverse)
  // escaped as the JSON library's own exception, naming neither the file nor the field.
  EXPECT_EQ(error_reading(replaced(kManifest, "\"pieces\": [", "\"pieces\": \"x\", \"was\": [")),
            "out/manifest.json: chunks[0].pieces: expected a list, got \"x\"");
  EXPECT_EQ(error_reading(
                replaced(kManifest, "\"state_dict\": [\"down1.weight\"]", "\"state_dict\": \"down1.weight\"")),
            "out/manifest.json: chunks[0].parameters[0].state_dict: expected a list of names, got \"down1.weight\"");
  EXPECT_EQ(error_reading(replaced(kManifest, "[\"bn.num_batches_tracked\"]", "[7]")),
            "out/manifest.json: chunks[0].buffers[0].state_dict[0]: expected a name, got 7");
  EXPECT_EQ(error_reading(replaced(kManifest, "\"inputs\": [\"out\"]", "\"inputs\": {\"a\": \"out\"}")),
            "out/manifest.json: loss.inputs: expected a list, got an object");
  EXPECT_EQ(error_reading(replaced(kManifest, "\"shape\": [2, 3, 8, 8], \"dtype\": \"float64\", \"model_input\"",
                                   "\"shape\": [2, -3, 8, 8], \"dtype\": \"float64\", \"model_input\"")),
            "out/manifest.json: inputs[0].shape[1]: expected a size (a whole number from 0), got -3");
  EXPECT_EQ(
      error_reading(replaced(kManifest, "\"dtype\": \"int64\"", "\"dtype\": \"complex64\"")),
      "out/manifest.json: chunks[0].buffers[0].dtype: 'complex64' is not a type the runtime knows (float32, float64, "
      "float16, bfloat16, int64, int32, int16, int8, uint8, bool)");
  EXPECT_EQ(error_reading(replaced(kManifest, "\"memory\": \"keep\"", "\"memory\": \"swap\"")),
            "out/manifest.json: chunks[0].pieces[1].memory: 'swap' is not keep, recompute or offload");
  EXPECT_EQ(error_reading(replaced(kManifest, "\"operators\": 4, \"first\"", "\"operators\": 4.5, \"first\"")),
            "out/manifest.json: chunks[0].operators: must be a whole number of at most 2147483647, got 4.5");
  EXPECT_EQ(error_reading(replaced(kManifest, "\"version\": 1", "\"version\": 2")),
            "out/manifest.json: version: unsupported version 2 (this build reads version 1)");
  EXPECT_EQ(error_reading(replaced(kManifest, "\"chunks\": [{", "\"chunks\": [], \"old\": [{")),
            "out/manifest.json: chunks: empty: an export has at least one chunk");
  nlohmann::json old = nlohmann::json::parse(kManifest);
  old.erase("graph");
  EXPECT_EQ(error_reading(old.dump()),
            "out/manifest.json: graph: missing (written by another version of flexpipe export? export again)");
  EXPECT_EQ(error_reading(R"({"format": "flexpipe-cost-graph", "version": 1})"),
            "out/manifest.json: format: expected \"flexpipe-export\", got \"flexpipe-cost-graph\"");
  EXPECT_EQ(error_reading("[1, 2]"), "out/manifest.json: expected an object, got an array");
  EXPECT_EQ(error_reading("{\"format\": \"flexpipe-export\",\n \"version\": 1,}"),
            "out/manifest.json:2:15: invalid JSON: syntax error while parsing object key - unexpected '}'; expected "
            "string literal");
}

TEST(ExportManifest, ATiedWeightNamesChunksThatHoldItBack) {
  // Two chunks holding one weight: each must name the other, and hold it alike.
  auto tied = [](const nlohmann::json& mine, const nlohmann::json& theirs) {
    nlohmann::json j = nlohmann::json::parse(kManifest);
    j["chunks"][0].erase("pieces");
    j["chunks"].push_back(j["chunks"][0]);
    j["chunks"][1]["file"] = "stage_1.pt";
    if (!mine.is_null()) j["chunks"][0]["parameters"][0]["tied_chunks"] = mine;
    if (!theirs.is_null()) j["chunks"][1]["parameters"][0]["tied_chunks"] = theirs;
    return j.dump();
  };
  const ExportManifest m = parse_export_manifest(tied({1}, {0}), "m.json");
  EXPECT_EQ(m.chunks[0].parameter_tied_chunks, (std::vector<std::vector<int>>{{1}}));
  EXPECT_EQ(m.chunks[1].parameter_tied_chunks, (std::vector<std::vector<int>>{{0}}));
  EXPECT_EQ(error_reading(tied({1}, nullptr)),
            "out/manifest.json: chunks[0].parameters[0].tied_chunks: chunk 1's down1.weight does not name chunk 0 in "
            "its tied_chunks");
  EXPECT_EQ(error_reading(tied({2}, {0})),
            "out/manifest.json: chunks[0].parameters[0].tied_chunks: 2 is not another chunk's index (0 to 1)");
  EXPECT_EQ(error_reading(tied({0}, {0})),
            "out/manifest.json: chunks[0].parameters[0].tied_chunks: 0 is this chunk: list the other chunks that hold "
            "down1.weight");
  EXPECT_EQ(
      error_reading(tied(1, {0})),
      "out/manifest.json: chunks[0].parameters[0].tied_chunks: expected a list of the other chunks' indices, got 1");
}

// The case the probe found: 200 thousand nested lists in a chunk's inputs overflowed the stack.
TEST(ExportManifest, ListsNestedBeyondTheLimitAreOneErrorNotAStackOverflow) {
  const std::string chunk_inputs = "\"last\": \"out\",\n    \"inputs\": [";
  EXPECT_EQ(error_reading(replaced(kManifest, chunk_inputs,
                                   chunk_inputs + std::string(200'000, '[') + std::string(200'000, ']') + ", ")),
            "out/manifest.json:6:1012: invalid JSON: arrays and objects nest deeper than 1000 levels");
  // At the limit the manifest reads as far as the field it is wrong in.
  EXPECT_EQ(error_reading(
                replaced(kManifest, chunk_inputs, chunk_inputs + std::string(996, '[') + std::string(996, ']') + ", ")),
            "out/manifest.json: chunks[0].inputs[0]: expected an object, got an array");
}

}  // namespace
}  // namespace flexpipe
