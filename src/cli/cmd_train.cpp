// flexpipe train: the main job. Trains a GPT-style model with pipeline parallelism (and data
// parallelism) on a text file or on synthetic data, with AdamW, warm-up and cosine decay and global
// gradient clipping; prints a progress line per step and, at the end, measured against simulated
// step time and memory per rank; saves and resumes checkpoints. Started without a job around it,
// it launches its own local ranks.
#include <memory>
#include <string>

#include "flexpipe/workflow/training_run.h"
#include "number_checks.h"
#include "options.h"

namespace flexpipe::cli {

namespace {

TrainRequest defaults() {
  TrainRequest o;
  o.command.model = ModelSize{4, 64, 4, 64, 64};
  runtime::TrainingOptions& t = o.command.request.training;
  t.steps = 100;
  t.microbatch_size = 4;
  t.learning_rate = 3e-3;
  t.weight_decay = 0.01;
  t.lr_schedule = true;
  t.warmup_steps = 10;
  t.max_grad_norm = 1.0;
  o.command.request.progress = true;
  return o;
}

}  // namespace

void add_train_command(CLI::App& app, const std::vector<std::string>& command_line, int& exit_code) {
  auto* command = app.add_subcommand(
      "train",
      "Train a GPT-style model with pipeline (and data) parallelism on a text file or synthetic data: "
      "progress per step, then measured against simulated time and memory; checkpoints and resume");
  auto o = std::make_shared<TrainRequest>(defaults());
  command->add_option("--schedule", o->schedule,
                      "Built-in name, file (.fps, .csv, .json), or auto: the fastest schedule `flexpipe search` finds "
                      "with the model's measured operator times (a captured --model's: those its capture measured; "
                      "the partition is written as GRAPH.auto-plan.json) [1f1b]");
  command->add_option("--profile", o->profile,
                      "With --schedule auto: the measured cost graph to use (written by `flexpipe profile`; "
                      "measured and saved here when the file does not exist)");
  auto* auto_margin =
      command
          ->add_option("--auto-margin", o->auto_margin,
                       "With --schedule auto: the search's own program is trained only when it is predicted at least "
                       "this fraction faster than the fastest built-in, which is trained otherwise (a smaller gain is "
                       "within the simulator's error; 0 trains whichever is predicted fastest) [0.05; when the ranks "
                       "outnumber this machine's cores, the fastest built-in]")
          ->check(fraction());
  add_training_options(command, o->command, std::to_string(kDefaultTrainDevices));
  command->add_option("--steps", o->command.request.training.steps, "Training steps [100]")
      ->check(whole_number_at_least(1));
  command->add_option("--data", o->command.request.training.data,
                      "A text file to train on, as byte-level tokens (sets --vocab 256); with a captured --model, a "
                      "torch.save'd dict {\"inputs\": ..., \"targets\": ...} [synthetic]");
  command->add_option("--model", o->command.captured_model,
                      "A captured PyTorch model (flexpipe capture -o GRAPH.json), trained with --plan's cuts (without "
                      "--plan: `flexpipe partition`'s default for the schedule, -p, -m and H100-80GB's memory, "
                      "written as GRAPH.plan.json; with --schedule auto: the search's) instead of the GPT-style model "
                      "[the GPT-style model of --layers, --hidden, ...]");
  command->add_option("--export-dir", o->command.request.export_dir,
                      "With --model: where its modules for the plan are written (flexpipe export) [GRAPH.export]");
  command
      ->add_option("--export-tolerance", o->export_tolerance,
                   "With --model: the export check's largest accepted difference from the model's outputs, "
                   "relative to the largest output [from the data type and the model's scale, docs/export.md]")
      ->check(non_negative_number());
  command->add_option("--export-weights", o->command.request.export_weights,
                      "With --model: write the trained weights by their state_dict names, for "
                      "model.load_state_dict(torch.load(FILE)); DIR/ (or a folder): a transformers model's "
                      "config.json and model.safetensors, for AutoModel*.from_pretrained(DIR)");
  command
      ->add_option("--warmup", o->command.request.training.warmup_steps,
                   "Steps of linear learning-rate warm-up; one longer than --steps is warned about [10]")
      ->check(whole_number_at_least(0));
  command
      ->add_option("--decay-steps", o->command.request.training.decay_steps,
                   "Cosine decay length after warm-up; 0: to the last step [0]")
      ->check(whole_number_at_least(0));
  command
      ->add_option("--min-lr-ratio", o->command.request.training.min_lr_ratio,
                   "Cosine decay floor, as a fraction of --lr [0.1]")
      ->check(fraction());
  command
      ->add_option("--clip", o->command.request.training.max_grad_norm,
                   "Clip gradients by their global norm over all stages; 0: never [1.0]")
      ->check(non_negative_number());
  auto plain_sgd_given = std::make_shared<bool>(false);
  CLI::Option* plain_sgd = command->add_flag(
      "--plain-sgd", *plain_sgd_given,
      "SGD at a constant --lr: --optimizer sgd --warmup 0 --min-lr-ratio 1 --clip 0 --weight-decay 0 (what "
      "torch.optim.SGD does with no scheduler, clipping or decay)");
  for (const char* name : {"--optimizer", "--warmup", "--min-lr-ratio", "--clip", "--weight-decay"})
    plain_sgd->excludes(name);
  command->add_option("--curve", o->command.request.curve_path, "Write the loss curve as an SVG chart (rank 0)");
  command->add_option("--checkpoint", o->command.request.checkpoint_dir, "Directory for checkpoints [none]");
  command->add_option("--save-every", o->command.request.save_every, "Steps between checkpoints; 0: at the end [0]")
      ->check(whole_number_at_least(0));
  command->add_flag("--resume", o->command.request.resume, "Continue from the latest checkpoint in --checkpoint");
  command->add_flag("--verify", o->command.request.verify,
                    "Also train in one process with autograd and compare (small models only)");
  command->callback([o, auto_margin, plain_sgd_given, &command_line, &exit_code] {
    o->auto_margin_given = auto_margin->count() > 0;
    if (*plain_sgd_given) {
      runtime::TrainingOptions& t = o->command.request.training;
      t.optimizer = "sgd";
      t.warmup_steps = 0;
      t.min_lr_ratio = 1;
      t.max_grad_norm = 0;
      t.weight_decay = 0;
    }
    exit_code = train(*o, command_line);
  });
}

}  // namespace flexpipe::cli
