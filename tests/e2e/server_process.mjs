// Starts `fathom serve` on 127.0.0.1 with a tiny DeepSeek-V3-shaped model (dummy weights) and the real
// DeepSeek tokenizer, for the end-to-end tests. Environment overrides: FATHOM_BINARY (default build/fathom),
// FATHOM_TOKENIZER_DIR (default ../shared/data/deepseek-v3 beside the repository, then /work/shared/...).
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

export function fathomBinary() {
  return process.env.FATHOM_BINARY ?? path.join(repoRoot, 'build', 'fathom');
}

export function tokenizerDir() {
  const candidates = [process.env.FATHOM_TOKENIZER_DIR, path.join(repoRoot, '..', 'shared', 'data', 'deepseek-v3'),
                      '/work/shared/data/deepseek-v3'];
  return candidates.find((dir) => dir && existsSync(path.join(dir, 'tokenizer.json')));
}

// The model tests' tiny config (tests/model/tiny_model.h), with the real vocabulary size so that the DeepSeek
// tokenizer's ids fit, and a context of 256 tokens.
export const tinyConfig = {
  architectures: ['DeepseekV3ForCausalLM'], model_type: 'deepseek_v3',
  vocab_size: 129280, hidden_size: 200, intermediate_size: 320, moe_intermediate_size: 72,
  num_hidden_layers: 3, num_nextn_predict_layers: 1, num_attention_heads: 3, num_key_value_heads: 3,
  q_lora_rank: 96, kv_lora_rank: 160, qk_nope_head_dim: 32, qk_rope_head_dim: 32, v_head_dim: 24,
  n_routed_experts: 8, n_shared_experts: 1, num_experts_per_tok: 3, n_group: 4, topk_group: 2,
  first_k_dense_replace: 1, moe_layer_freq: 1, norm_topk_prob: true, routed_scaling_factor: 2.5,
  scoring_func: 'sigmoid', topk_method: 'noaux_tc', rms_norm_eps: 1e-6, rope_theta: 10000,
  max_position_embeddings: 256, bos_token_id: 0, eos_token_id: 1, tie_word_embeddings: false,
  rope_scaling: { type: 'yarn', factor: 4, original_max_position_embeddings: 64, beta_fast: 32,
                  beta_slow: 1, mscale: 0.707, mscale_all_dim: 0.707 },
  quantization_config: { quant_method: 'fp8', fmt: 'e4m3', activation_scheme: 'dynamic', weight_block_size: [128, 128] },
};

// Resolves with { url, port, process, output(), stop() } once the server prints its URL. Without `checkpointDir`
// it serves the tiny config with dummy weights and the DeepSeek tokenizer; with it, that checkpoint (weights,
// tokenizer and chat template from the directory).
export async function startServer({ extraArgs = [], servedModelName = 'tiny-deepseek', apiKey, checkpointDir } = {}) {
  const modelDir = checkpointDir ?? mkdtempSync(path.join(tmpdir(), 'fathom-e2e-'));
  if (!checkpointDir) writeFileSync(path.join(modelDir, 'config.json'), JSON.stringify(tinyConfig, null, 2));
  const modelArgs = checkpointDir ? ['--model', checkpointDir]
                                  : ['--model', modelDir, '--load-format', 'dummy', '--tokenizer', tokenizerDir()];
  const args = ['serve', ...modelArgs,
                '--host', '127.0.0.1', '--port', '0', '--served-model-name', servedModelName, '--threads', '2',
                ...(apiKey ? ['--api-key', apiKey] : []), ...extraArgs];
  const child = spawn(fathomBinary(), args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start within 120 s:\n${output}`)), 120_000);
    const onData = (data) => {
      output += data.toString();
      const match = output.match(/listening on (http:\/\/\S+)/);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    exited.then(({ code }) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code} before listening:\n${output}`));
    });
  });
  let stopped = null;
  return {
    url,
    port: Number(new URL(url).port),
    process: child,
    output: () => output,
    exited,
    // SIGTERM; resolves with the exit status (drains in-flight requests first).
    stop: async () => {
      if (!stopped) {
        child.kill('SIGTERM');
        stopped = exited.finally(() => {
          if (!checkpointDir) rmSync(modelDir, { recursive: true, force: true });
        });
      }
      return stopped;
    },
  };
}

export async function getJson(url, init = {}) {
  const response = await fetch(url, init);
  return { status: response.status, body: await response.json() };
}

export async function waitFor(predicate, { timeoutMs = 20_000, intervalMs = 50, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await predicate()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
