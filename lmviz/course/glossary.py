"""The words the pages use, each defined once: the Glossary page shows them, and every
page links a term's first use to its entry (``link``, through lmviz.app.chrome.term), so a learner who meets a word
for the first time is one click from what it means. Plain data: no Streamlit, no torch.
"""

from __future__ import annotations

import re

from lmviz.core.trl import TRL

# term -> (the words that count as a use of it on a page, its definition)
TERMS: dict[str, tuple[tuple[str, ...], str]] = {
    "token": (("token", "tokens"),
              "A piece of text the model reads as one unit: a word, part of a word, a space with a word, or a "
              "punctuation mark. The tokenizer cuts text into tokens and gives each one an id, its index in the "
              "model's vocabulary of V tokens."),
    "byte piece": (("byte piece", "byte pieces"),
                   "A token of a byte-level BPE tokenizer (GPT-2's, SmolLM2's) that holds some of a character's "
                   "UTF-8 bytes but not all. UTF-8 writes a character in 1 to 4 bytes: an English letter in 1, a "
                   "letter of many other scripts in 2 or 3, an emoji in 4 (🍕 is F0 9F 8D 95). These tokenizers "
                   "build their vocabulary from bytes, so a character without a token of its own is cut between "
                   "tokens: SmolLM2's tokenizer cuts “ 🍕” into <20 F0 9F>, <8D> and <95>. A byte piece is no text on "
                   "its own, so the pages show it as its bytes in hex, <20 F0 9F> (20 is the space); the token or "
                   "tokens after it complete the character. SentencePiece's byte fallback writes the same one byte "
                   "at a time, <0xF0>."),
    "label": (("label", "labels"),
              "The token the model should have predicted at a position. The pages' tables show a position's label "
              "shifted: for a causal LM the label at position t is the input token at position t + 1. Hugging "
              "Face's labels argument is not shifted: a causal LM is given labels = input_ids, the same length, and "
              "shifts them by one place inside its loss (so the first token is never a label)."),
    "logit": (("logit", "logits"),
              "The raw score a model gives each token of its vocabulary before softmax: any real number, higher "
              "meaning more likely. Only differences between logits matter."),
    "softmax": (("softmax",),
                "Turns logits z into probabilities: p_i = exp(z_i) / Σ_j exp(z_j). Every p_i is between 0 and 1, "
                "they add up to 1, and the largest logit gets the largest probability."),
    "temperature": (("temperature",),
                    "A number T that the logits are divided by before softmax when text is generated: T < 1 "
                    "sharpens the distribution toward the top token, T > 1 flattens it, T = 1 is the model's own. "
                    "Training always uses T = 1."),
    "log-probability": (("log-probability", "log p", "log_softmax"),
                        "log p, the natural logarithm of a probability: 0 for p = 1, negative below. log_softmax "
                        "computes it from the logits directly, z minus log Σ e^z, so it stays finite where p is too "
                        "small for float32 to hold (log of a p rounded to 0 would be −∞). It is still arithmetic in "
                        "the float type it runs in: in float32 it is accurate to float32's rounding, not exact (the "
                        "Next token page measures the difference from float64 for its text)."),
    "cross-entropy": (("cross-entropy",),
                      "The training loss of a classifier: -log p(the true answer), averaged over the predictions. "
                      "A language model is a classifier over its vocabulary at every position."),
    "nats": (("nats", "nat"),
             "The unit of a loss computed with the natural logarithm (ln). 1 nat = 1 / ln 2 ≈ 1.443 bits. A loss "
             "of L nats means the true token got probability exp(-L) on average (geometrically)."),
    "UTF-8": (("UTF-8",),
              "How text is stored as bytes, a byte being a number from 0 to 255 (two hex digits, 00 to FF). UTF-8 "
              "writes a character in 1 to 4 bytes: an English letter, a digit, a space or a line break in 1, a "
              "letter with an accent in 2 (é is C3 A9), most Chinese, Japanese and Korean characters in 3 (東 is E6 "
              "9D B1), an emoji in 4 (🍕 is F0 9F 8D 95). A text's length in bytes is len(text.encode(\"utf-8\")) in "
              "Python; its length in characters, len(text), is smaller wherever a character takes more than one "
              "byte."),
    "bits per byte": (("bits per byte", "bpb"),
                      "A model's loss on a text counted per byte of the text rather than per token: Σ −ln p over "
                      "the text's tokens ÷ (ln 2 × the text's bytes in UTF-8), which is (nats per token) ÷ (ln 2 × "
                      "bytes per token). Every tokenizer cuts the same text into the same bytes, so two models with "
                      "different tokenizers can be compared by it, which their losses per token cannot: a tokenizer "
                      "with fewer, longer tokens has more to predict at each. Byte perplexity and word perplexity "
                      "divide by counts no tokenizer changes either, and rank models alike; none of the three is fair "
                      "where a tokenizer drops text (lowercasing, unknown tokens): its model is never asked to "
                      "predict what was dropped. Lower is better. The toy example's "
                      "4.315116 nats over the 20 bytes of “I love dogs not cats” are 0.311270 bits per byte."),
    "byte perplexity": (("byte perplexity",),
                        "2 to the power of the bits per byte, the same as e^(nats per byte): the number of equally "
                        "likely bytes the model is, on average, choosing between at each byte. lm-evaluation-harness "
                        "reports it beside bits per byte."),
    "word perplexity": (("word perplexity",),
                        "e^(Σ −ln p ÷ the number of words): the loss counted per word. lm-evaluation-harness "
                        "counts words as the pieces of re.split(r\"\\s+\", text), so a text that ends with a "
                        "space or a line break counts one word more than it has (an empty last piece)."),
    "context length": (("context length", "context lengths"),
                       "How many tokens a prediction is made from: the tokens before it that the model reads in "
                       "the same pass. Scored in one pass, token t of a text is predicted from all t before it; "
                       "scored in windows, from only those before it in its own window, and its −log p is then "
                       "usually higher."),
    # transformers 5.24: GPT2Model.wpe is nn.Embedding(max_position_embeddings, …), n_positions by another name
    # (models/gpt2); LlamaRotaryEmbedding.forward computes its cos and sin from any position_ids (models/llama);
    # utils/auto_docstring.py: max_position_embeddings is "The maximum sequence length that this model might ever be
    # used with."
    "window": (("window", "windows"),
               "The tokens a model reads in one forward pass, when a text is longer than it reads at once or is cut "
               "on purpose: the text is scored window by window, and a token sees only the tokens before it in its "
               "own window. lmviz reads a model's limit from its config: GPT-2's learned position embeddings end "
               "at its n_positions; rotary position embeddings, SmolLM2's, are computed for any position, and its "
               "max_position_embeddings is the longest sequence it is meant to be used with. lm-evaluation-harness's "
               "window of N tokens is the N tokens the model reads; in the loop of Hugging Face's perplexity guide, "
               "the last of a window's max_length tokens is only a label, so a token has at most max_length − 1 of "
               "context."),
    "stride": (("stride",),
               "How many tokens one window starts after the one before it, in the loop of Hugging Face's perplexity "
               "guide: with a stride smaller than the window, windows overlap, each scores only the tokens the one "
               "before did not, and those tokens keep up to window − stride tokens of context from the overlap. A "
               "stride equal to the window gives disjoint windows, and the first token of each is never scored."),
    "distillation": (("distillation",),
                     "Training a student model on what a teacher model predicts rather than on the data's one true "
                     "token: at each position, a divergence between the two models' whole distributions over the "
                     "vocabulary (soft distillation), or the cross-entropy on text the teacher wrote (hard "
                     "distillation, which is fine-tuning on teacher text). Context distillation makes one model both: "
                     "the teacher is the model given a context (instructions, examples, the answer), the student the "
                     "same model without it."),
    "teacher model": (("teacher model", "teacher models"),
                      "In distillation, the model whose distribution at each position the student learns to match; "
                      "its weights do not change."),
    "student model": (("student model", "student models"),
                      "In distillation, the model being trained to match the teacher model's distributions."),
    "forward KL": (("forward KL",),
                   "KL(p_T ‖ p_S) = Σ_v p_T(v) (log p_T(v) − log p_S(v)), the teacher's distribution first: each "
                   "token weighed by the teacher's probability, so it is large where the student misses a token the "
                   "teacher likes (mass-covering). Minimised, the student spreads over everything the teacher "
                   "considers. In PyTorch, F.kl_div(log p_S, log p_T, log_target=True) summed over the vocabulary "
                   "(kl_div's first argument is the second distribution)."),
    "reverse KL": (("reverse KL",),
                   "KL(p_S ‖ p_T) = Σ_v p_S(v) (log p_S(v) − log p_T(v)), the student's distribution first: large "
                   "where the student gives probability to a token the teacher does not (mode-seeking). Minimised, "
                   "the student keeps to what the teacher finds likely and may drop the rest. On-policy distillation "
                   "uses it per token."),
    "JSD": (("generalized JSD", "JSD", "Jensen-Shannon"),
            "The generalized Jensen-Shannon divergence of GKD (Agarwal et al. 2024, eq. 1): JSD_β = β KL(p_T ‖ M) + "
            "(1 − β) KL(p_S ‖ M), M = β p_T + (1 − β) p_S. It tends to 0 as β tends to 0 or 1, where M becomes one of "
            "the two. TRL's generalized_jsd_loss defines β = 0 as the forward KL and β = 1 as the reverse KL instead, "
            "so its loss jumps at both ends."),
    "temperature in distillation": (("τ²",),
                                    "Distillation divides both models' logits by a temperature τ before the softmax, "
                                    "which flattens both distributions. Where τ is large "
                                    "against the gaps between a position's logits, the loss and its gradient shrink "
                                    "about as 1/τ²; at smaller τ no such rule holds (below τ = 1 the loss can even "
                                    "grow with τ). Hinton et al. (2015) multiply the loss by τ² to keep the gradient's "
                                    "size (DistilBERT does); TRL's trainers do not."),
    "on-policy": (("on-policy",),
                  "Trained on samples the model being trained drew itself, now, rather than on fixed data. On-policy "
                  "distillation lets the student answer and the teacher score each of its tokens; log π_S − log π_T at "
                  "the token drawn, a one-sample estimate of the reverse KL at that position, is the token's "
                  "negative advantage."),
    "perplexity": (("perplexity",),
                   "exp(loss): the number of equally likely tokens the model is, on average, choosing between. "
                   "A uniform guess over V tokens has perplexity V and loss ln V."),
    "BOS / EOS": (("BOS", "EOS", "start-of-text token", "end-of-text token"),
                  "Beginning- and end-of-sequence tokens: special tokens that mark where a text starts and ends. "
                  "Which token plays which role is a property of each tokenizer (its bos_token and eos_token). "
                  "Where a vocabulary has a document separator, <|endoftext|> (GPT-2's, SmolLM2's), the pages start "
                  "and end a text with it, as the text these models are pre-trained on is written; only without one "
                  "they use the tokenizer's bos_token, then its eos_token. A chat tokenizer's bos_token and "
                  "eos_token can be chat-turn markers instead (SmolLM2-Instruct's are <|im_start|> and <|im_end|>): "
                  "the pages say, from the tokenizer in use, which token they add and what it is."),
    "padding": (("padding", "pad", "pads", "padded"),
                "Filler tokens that make the sentences of a batch the same length. The attention mask marks them "
                "(0 = pad) so that no real token attends to them, and their labels are -100 so they never count."),
    "-100 / ignore_index": (("-100", "ignore_index"),
                            "The label value that PyTorch's cross_entropy and Hugging Face's models skip: a position "
                            "labelled -100 adds nothing to the loss and is not counted in its mean."),
    "WordPiece ##": (("WordPiece", "##"),
                     "BERT's tokenizer. A word it does not know whole is split into known pieces; a piece that "
                     "continues a word starts with ##, so 'playing' can become 'play' + '##ing'."),
    "[CLS] / [SEP] / [MASK]": (("[CLS]", "[SEP]", "[MASK]"),
                               "BERT's special tokens: [CLS] starts every input (the next-sentence head reads its "
                               "output), [SEP] ends each sentence, and [MASK] hides a token the model must recover."),
    "greedy decoding": (("greedy decoding", "greedy"),
                        "Generating text by always appending the token with the highest logit (the arg-max). It "
                        "writes the same text every time, and the temperature never changes its choice: dividing "
                        "every logit by T keeps their order."),
    "sampling": (("sampling", "sampled"),
                 "Generating text by drawing the next token at random with the model's probabilities at "
                 "temperature T: a token of p = 0.2 is drawn about one time in five. Likely tokens come most often, "
                 "unlikely ones sometimes, so two runs write different texts unless they use the same seed."),
    "seed": (("seed", "seeds"),
             "The number a random number generator starts from. The same seed gives the same draws (the same "
             "sampled token, the same mask), so a result can be reproduced; another seed gives other draws."),
    "chat template": (("chat template", "chat templates"),
                      "A chat tokenizer's recipe for writing a conversation (system, user and assistant turns) out "
                      "as one text, with the marker tokens its model was fine-tuned with around every turn. It is "
                      "a Jinja template stored with the tokenizer (tokenizer.chat_template), and "
                      "tokenizer.apply_chat_template runs it."),
    "end-of-turn token": (("end-of-turn token", "end-of-turn tokens", "end-of-turn"),
                          "The special token a chat template writes at the end of a turn (<|im_end|> in the ChatML "
                          "template SmolLM2 uses). A chat model learns to write it after its answer: it is how the "
                          "program running the model knows that the answer is finished, and generation stops there."),
    "SFT": (("SFT", "supervised fine-tuning"),
            "Supervised fine-tuning: training a pre-trained model further on example texts, for a chat model on "
            "conversations written out by its chat template, with the same loss as pre-training: the mean -log p "
            "over the labels that count. Which labels count is a choice. TRL's SFTTrainer counts every token of a "
            "conversation by default; with assistant_only_loss=True, or on a prompt–completion dataset, only the "
            "answer's, with -100 on every other label."),
    "DPO": (("DPO", "direct preference optimisation", "direct preference optimization"),
            "Direct preference optimisation (Rafailov et al., 2023): training on pairs of answers to one prompt, a "
            "chosen and a rejected one. The loss of a pair is −log σ(β · ((log π(chosen) − log π_ref(chosen)) − "
            "(log π(rejected) − log π_ref(rejected)))), where log π of an answer is the sum of its tokens' log p "
            "under the policy being trained, log π_ref the same under the frozen reference model, σ the sigmoid and "
            "β a setting. It falls from ln 2 toward 0 as training raises the chosen answer's log π, measured from the "
            "reference, further above the rejected one's."),
    "policy": (("policy", "π"),
               "In preference training (DPO) and reinforcement learning (GRPO, PPO), the model being trained, "
               "written π (π_θ for its current weights θ). π(answer | prompt) is the "
               "probability it gives a whole answer, the product of its tokens' p, so log π(answer) is the sum of "
               "their log p. The word comes from reinforcement learning, where a policy chooses actions."),
    "reference model": (("reference model", "π_ref", "π₀"),
                        "In preference training (DPO) and in GRPO, a frozen copy of the model as it was before this "
                        "training (usually the fine-tuned SFT model), written π_ref (or π₀). DPO's loss reads how far "
                        "training has moved the policy from it, through the differences log π − log π_ref; GRPO adds "
                        "β times an estimate of the KL divergence to it, which keeps the policy near it. Before any "
                        "training the policy is the reference: every difference is 0, DPO's loss is "
                        "−log σ(0) = ln 2, and the KL is 0. The reference stays as it was while the policy trains, so "
                        "later in training the KL is above 0 before each update too."),
    "sigmoid": (("sigmoid", "σ"),
                "σ(x) = 1 / (1 + e^−x): turns any real number into a probability between 0 and 1, with σ(0) = 1/2 "
                "and σ(−x) = 1 − σ(x). For two classes with logits a and b, softmax([a, b]) gives class b the "
                "probability σ(b − a): a two-way classifier needs only one score, the difference."),
    "β (beta)": (("β",),
                 "A setting for how far the policy may move from the reference model. In DPO (TRL's DPOConfig beta, "
                 "0.1 by default) it multiplies the difference of log-ratios before the sigmoid: with a larger β the "
                 "loss levels off after a smaller move, so training keeps the policy closer to the reference. In "
                 "GRPO it is the weight of the KL term added to each token's loss (DeepSeekMath used 0.04; TRL's "
                 f"GRPOConfig defaults to {TRL.beta:g}, no KL term at all)."),
    "binary cross-entropy": (("binary cross-entropy",),
                             "The cross-entropy of a yes-or-no prediction made from one score s: p = σ(s) is the "
                             "probability of one class, and the loss is −log p if the label is that class, "
                             "−log (1 − p) if not (PyTorch's binary_cross_entropy_with_logits). With s = b − a it "
                             "equals the two-way cross-entropy of the logits [a, b]."),
    "MLM weight / NSP weight": (("MLM weight", "NSP weight", "MLM and NSP weights"),
                                "The numbers the BERT loss page multiplies its two parts by before adding them: "
                                "total = MLM weight × the masked-LM (masked language modelling) loss + NSP weight × "
                                "the NSP (next-sentence prediction) loss. BERT was trained, and Hugging Face's "
                                "BertForPreTraining computes its loss, with both weights 1; other weights are "
                                "lmviz's, to show how much each part moves the total."),
    "unigram entropy": (("unigram entropy",),
                        "−Σ f ln f over the distinct tokens of a text, where f is each token's share of its tokens "
                        "(unigram: one token at a time). It is the loss, on that text, of the best model that knows "
                        "only how often each token occurs and ignores the tokens around it; a model that reads the "
                        "context can go below it."),
    "reward": (("reward", "rewards"),
               "A number that scores a whole answer once it is written. Here a rule gives it: 1 when the answer "
               "passes (it contains the right number, say) and 0 when not, a reward anyone can check. Elsewhere a "
               "reward model gives it. Reinforcement learning fine-tunes a model to make answers of high reward "
               "more likely."),
    "advantage": (("advantage", "advantages"),
                  "How much better an answer did than expected, A. GRPO expects its group's mean reward: A_i = "
                  "R_i − mean(R), divided by the group's standard deviation (DeepSeekMath does not say which; TRL "
                  f"takes the sample one and adds {TRL.std_eps:g}; Dr. GRPO leaves the division out). "
                  "To first order, for a small enough step, an answer's own term pushes its tokens up where its "
                  "advantage is positive and down where it is negative; the answers share the model's weights, so "
                  "the others' terms move it too, and a step of finite size can move it against its advantage. "
                  "When every reward of the group is equal, every advantage is 0 and the group teaches nothing."),
    "GRPO": (("GRPO",),
             "Group Relative Policy Optimization (DeepSeekMath, Shao et al. 2024): reinforcement learning that samples "
             "a group of G answers to each prompt and uses each answer's reward compared with its group's as its "
             "advantage, in place of the value model PPO trains. Each answer token's loss is PPO's clipped term, "
             "plus β times an estimate of the KL divergence to a reference model."),
    "PPO": (("PPO",),
            "Proximal Policy Optimization (Schulman et al. 2017): a reinforcement-learning objective that weighs each "
            "action's advantage (for a language model, each token's) by the ratio of the new policy's probability "
            "to the old one's, and clips that ratio to [1 − ε, 1 + ε], so that one batch of samples cannot push "
            "the policy far."),
    "ratio": (("ratio", "ratios"),
              "PPO's and GRPO's importance ratio, r = π_θ(token) / π_old(token) = e^(log π_θ − log π_old): how much "
              "more likely the policy being trained makes a token than the policy that sampled it did. At the "
              "first update on a group the two are the same weights and every ratio is exactly 1. It leaves 1 once "
              "the weights have taken an optimizer step since the answers were sampled: when the same answers are "
              "used for another update (TRL's num_iterations, by default "
              f"{TRL.num_iterations}), or when one generation is split over several optimizer steps (TRL's "
              "steps_per_generation, which defaults to gradient_accumulation_steps: TRL computes π_old's "
              "log-probabilities whenever gradient_accumulation_steps is not a multiple of steps_per_generation × "
              "num_iterations, and whenever vLLM samples the answers). GSPO (Zheng et al. 2025) takes one ratio "
              "per answer instead, e to the mean of its tokens' log-ratios."),
    "clip": (("clip", "clipped", "clip fraction"),
             f"PPO's clip(r, 1 − ε, 1 + ε): the ratio held inside a range around 1 (ε = {TRL.epsilon:g} by default "
             "in TRL). Each token's term is the smaller of r·A and clip(r)·A; where the clipped one is the smaller, "
             "the term's gradient is 0, so the update stops pushing a token whose probability has already moved far "
             "enough that way. The clip fraction is the share of tokens where that happens (of answers, with one "
             "ratio per answer). It is 0 at every first update on a group, where every ratio is 1, so with TRL's "
             f"defaults (num_iterations = {TRL.num_iterations}, one optimizer step per generation) it is 0 at every "
             "step: the clip acts when samples are used again, by more updates on a group or by one generation split "
             "over several optimizer steps."),
    "KL divergence": (("KL", "KL divergence", "Kullback–Leibler"),
                      "The Kullback–Leibler divergence, how far one probability distribution is from another: 0 when "
                      "they are equal, positive otherwise. GRPO estimates it at each answer token between the policy "
                      "and the reference model with k3 = e^(log π_ref − log π_θ) − (log π_ref − log π_θ) − 1 "
                      "(Schulman's estimator), which is never negative and is 0 where the two agree. Its mean is "
                      "KL(π_θ ‖ π_ref) only over tokens drawn from π_θ; the answers were drawn by π_old, so TRL "
                      "multiplies k3 by the ratio π_θ / π_old (use_bias_correction_kl, "
                      f"{'on' if TRL.use_bias_correction_kl else 'off'} by default), which DeepSeekMath's plain k3 "
                      "does not."),
    "reward model": (("reward model", "reward models"),
                     "A model that scores an answer with one number, trained on pairs of answers of which people "
                     "preferred one, by the Bradley–Terry loss −log σ(r_chosen − r_rejected) (InstructGPT, Ouyang "
                     "et al. 2022). DPO's loss is that same loss, with the implicit reward β · (log π − log π_ref) of "
                     "each answer in place of a reward model's score."),
    "Bradley–Terry": (("Bradley–Terry", "Bradley-Terry"),
                      "A model of a preference between two things from a score r for each: P(a is preferred to b) = "
                      "σ(r_a − r_b). Its loss for a pair, −log σ(r_chosen − r_rejected), is how reward models are "
                      "trained."),
    "gradient": (("gradient", "gradients"),
                 "How fast the loss changes as each number it depends on (a logit, a weight) alone is raised: the "
                 "derivative of the loss with respect to that number. For the mean cross-entropy over N labels, the "
                 "gradient with respect to a position's logits is (p − y)/N, where p is softmax's probabilities and "
                 "y is 1 on the label and 0 elsewhere: the label's entry (p − 1)/N is negative, every other is p/N, "
                 "and they add up to 0. loss.backward() computes every weight's gradient in PyTorch."),
    "learning rate": (("learning rate", "learning rates"),
                      "The number η (lr in PyTorch) that sets the size of an optimizer step: SGD moves each weight "
                      "by −η × its gradient. Too small and the loss falls slowly; too large and a step overshoots, "
                      "and the loss of a real model can rise instead. torch.optim.SGD and torch.optim.AdamW both "
                      "default to 1e-3."),
    "optimizer step": (("optimizer step", "optimizer steps", "optimiser step", "optimiser steps"),
                       "One update of a model's weights from their gradients, by an optimizer's rule (SGD, AdamW): "
                       "in PyTorch, loss.backward() computes the gradients, optimizer.step() moves the weights and "
                       "optimizer.zero_grad() clears the gradients for the next batch."),
    "backpropagation": (("backpropagation",),
                        "How the gradient of the loss with respect to every weight is computed: the chain rule, "
                        "applied from the loss back through the forward pass's operations in reverse order, each "
                        "multiplying the gradient that reaches its output by its own derivative. It gives the exact "
                        "gradient of the loss as computed, up to floating-point rounding, not an estimate of it."),
    "autograd": (("autograd",),
                 "PyTorch's automatic differentiation: while a forward pass runs, torch records each operation on "
                 "tensors that require a gradient, and loss.backward() (or torch.autograd.grad) runs "
                 "backpropagation over that record, leaving each weight's gradient in its .grad. One step of "
                 "learning sets autograd's gradient beside the formula's, written out by hand."),
    "standard deviation": (("standard deviation", "sample std", "population std"),
                           "How far numbers spread around their mean: the square root of their squared deviations "
                           "from the mean, summed and divided by a count. The population standard deviation divides "
                           "by n, the count; the sample standard deviation by n − 1 (Bessel's correction), larger "
                           "for few numbers. torch.std takes the sample one by default (correction=1), as TRL's "
                           "GRPO advantages do; numpy.std the population one (ddof=0). For the rewards 1 and 0 the "
                           "population std is 0.50000 and the sample std 0.70711."),
    "SGD": (("SGD", "stochastic gradient descent"),
            "Stochastic gradient descent: the plainest optimizer step, w ← w − η × ∂loss/∂w for every weight w, "
            "with the gradient of the loss on one batch (stochastic: a sample of the data, not all of it). "
            "torch.optim.SGD does this, with lr = 1e-3 and no momentum by default."),
    "AdamW": (("AdamW",),
              "Adam with decoupled weight decay (Loshchilov and Hutter, 2019): an optimizer that keeps, for every "
              "weight, running averages of its gradient and of its gradient squared (each corrected for starting "
              "at 0), and moves the weight by η × (the first) / (√(the second) + ε), after shrinking it by the "
              "factor 1 − η·λ (the weight decay). "
              "At its first step the two averages are g and g², so the move is η × g / (|g| + ε): about η × the "
              "sign of g where |g| is far above ε, whatever its size, and about η × g / ε, proportional to g, where "
              "|g| is far below ε (as many of an embedding's weights are: the rows of tokens a text neither holds "
              "nor makes likely get tiny gradients). "
              "torch.optim.AdamW's defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 1e-2."),
    "packing": (("packing",),
                "Putting several training texts one after another in one row, instead of one per row with padding: "
                "no slot is spent on pads. It is correct only with a document mask; without one, each text attends "
                "to the texts before it in the row, and the first token of each is scored as if it followed the "
                "one before. transformers' DataCollatorWithFlattening packs a batch so; TRL's SFT trainer packs only "
                "when asked (SFTConfig's packing is False by default)."),
    "document mask": (("document mask",),
                      "What makes a packed row score each text as if it were alone: attention within each text only "
                      "(a block-diagonal causal mask), position ids that restart at 0 with each text, and the label "
                      "-100 at each text's first token, which nothing in its own text comes before. Then the packed "
                      "loss equals the token-weighted loss of the same texts padded."),
    "RLOO": (("RLOO",),
             "REINFORCE Leave-One-Out (Ahmadian et al. 2024; TRL's RLOOTrainer): each sampled answer's advantage is "
             "its reward minus the mean reward of the other answers to the same prompt, r_i − (Σ_j r_j − r_i) / "
             "(G − 1) = G/(G − 1) · (r_i − mean), with no standard deviation. With 2 right answers (reward 1) of 8, "
             "a right one gets +0.857143 and a wrong one −0.285714. RLOO also subtracts its KL penalty from the "
             "reward, and takes one ratio per answer."),
    "clip-higher": (("clip-higher",),
                    "DAPO's asymmetric clip (Yu et al. 2025): the ratio is clipped to [1 − ε_low, 1 + ε_high] with "
                    "ε_high above ε_low, 0.28 against 0.2, so that a rewarded token whose probability was low can "
                    "rise further before the clip stops its gradient. TRL's GRPOConfig calls the upper one "
                    "epsilon_high, which is epsilon unless it is set."),
    "CISPO": (("CISPO",),
              "Clipped importance-sampling policy optimisation (MiniMax-M1, 2025), TRL's loss_type \"cispo\": each "
              "token's term is −sg(min(r, ε_max))·A·log π_θ, sg stopping the gradient. It drops PPO's min and clip, "
              "so no token's gradient is ever zeroed; the ratio only weighs it, capped at ε_max (TRL's epsilon_high "
              "under cispo, whose docs recommend 5). That one-sided cap is ScaleRL's form, which TRL's help cites "
              "and computes; MiniMax-M1's paper writes the weight clipped on both sides, "
              "clip(r, 1 − ε_low, 1 + ε_high)."),
    "IPO": (("IPO",),
            "Identity preference optimisation (Azar et al. 2023), one of TRL's DPO loss types: with h the difference "
            "between the chosen and the rejected answer's log π − log π_ref, the loss is (h − 1/(2β))². TRL's "
            "DPOTrainer first divides each log-ratio by its answer's tokens, a normalisation its code says the IPO "
            "paper does not discuss explicitly, and that the paper's results use (confirmed with its authors). It "
            "stops pushing once the margin reaches 1/(2β), where DPO's "
            "−log σ(β·h) keeps rewarding a larger one."),
    "SimPO": (("SimPO",),
              "Simple preference optimisation (Meng et al. 2024): −log σ(β · (the chosen answer's mean log p per token "
              "− the rejected one's) − γ), with no reference model, a target margin γ and no NLL term; its paper "
              "trains with β from 2 to 10. TRL computes it in its CPOTrainer, whose CPOConfig has β 0.1, γ 0.5 and "
              "cpo_alpha 1.0 by default: it adds cpo_alpha × the chosen answer's NLL unless cpo_alpha is set to 0, "
              "and TRL's docs call SimPO with that NLL added CPO-SimPO."),
    "ORPO": (("ORPO",),
             "Odds ratio preference optimisation (Hong et al. 2024): the chosen answer's NLL plus λ × "
             "−log σ(log(odds(chosen) / odds(rejected))), where odds(y) = p / (1 − p) and p is the answer's mean "
             "probability per token (e to its mean log p). Fine-tuning and preference in one loss, with no reference "
             "model; TRL's ORPOConfig has λ = beta = 0.1, and its ORPOTrainer averages the NLL over the prompt's "
             "tokens as well as the answer's."),
    "KTO": (("KTO",),
            "Kahneman–Tversky optimisation (Ethayarajh et al. 2024): each answer is labelled desirable or not, with "
            "no pair needed. With r = log π − log π_ref of the answer and a reference point z₀, a desirable answer "
            "costs 1 − σ(β (r − z₀)) and an undesirable one 1 − σ(β (z₀ − r)). TRL's KTOTrainer estimates z₀ from "
            "the log-ratios of mismatched prompt–answer pairs, clamped at 0."),
    "entropy": (("entropy",),
                "H = −Σ p ln p over the outcomes of a distribution, in nats: the mean −ln p a guesser pays when the "
                "outcomes come as often as its own probabilities say. 0 when one outcome is certain, ln C when all "
                "C outcomes are equally likely. A position's entropy is about the model's whole guess; its −log p of "
                "the label is about the one token that came, so a model can be sure (low H) and wrong (high −log p)."),
    "label smoothing": (("label smoothing",),
                        "A change of the cross-entropy's target: 1 − ε + ε/C on the label and ε/C on each of the "
                        "other classes, instead of 1 and 0 (C classes: a language model's whole vocabulary). Each "
                        "position's loss becomes (1 − ε)·(−log p_label) + ε·(1/C)·Σ_c (−log p_c), which "
                        "torch.nn.functional.cross_entropy computes with label_smoothing=ε; its minimum is no longer "
                        "at p_label = 1, so the model is kept from being sure."),
    "z-loss": (("z-loss",),
               "An extra loss on the softmax's normaliser: coefficient × (log Z)², where log Z = log Σ_j e^(z_j) "
               "over a position's logits, averaged over the positions (PaLM, with coefficient 1e-4; OLMo). The "
               "cross-entropy does not change when a constant is added to every logit, so alone it lets the logits "
               "drift to large values; the z-loss pulls log Z towards 0, which keeps them in a range that half "
               "precision holds."),
    "soft-cap": (("soft-cap", "soft-capping", "soft-capped"),
                 "A smooth limit on the logits before the softmax: z ← c·tanh(z/c), about z where |z| is well below "
                 "c and never past ±c. Gemma 2 caps its output logits at c = 30 (final_logit_softcapping), nanochat "
                 "at 15. It bounds how sure the model can be: with every logit within ±c, no probability is above "
                 "e^(2c) times another."),
}


# lesson url_path (lmviz.course.registry) -> the terms its page uses, each linked where the page first uses it.
# Declared by hand, beside the entries: a page that starts using a word adds it here, and
# tests/course/test_glossary.py fails on a declared term without an entry, on a declared term the page does not
# link, and on a term of the glossary the page uses without declaring it.
LESSON_TERMS: dict[str, tuple[str, ...]] = {
    "toy": ("label", "greedy decoding", "perplexity", "logit", "log-probability", "softmax", "gradient",
            "learning rate", "SGD", "optimizer step", "AdamW", "label smoothing", "z-loss", "soft-cap", "entropy",
            "cross-entropy", "nats"),
    "sentence": ("token", "label", "log-probability", "cross-entropy", "softmax", "byte piece"),
    "next-token": ("token", "logit", "softmax", "temperature", "log-probability", "greedy decoding", "sampling",
                   "seed", "byte piece"),
    "step": ("token", "label", "logit", "softmax", "log-probability", "gradient", "learning rate", "SGD",
             "optimizer step", "AdamW", "autograd", "backpropagation"),
    "chat-loss": ("token", "label", "-100 / ignore_index", "log-probability", "chat template", "end-of-turn token",
                  "SFT", "DPO", "policy", "reference model", "sigmoid", "β (beta)", "nats", "reward model", "IPO",
                  "SimPO", "ORPO", "KTO"),
    "grpo": ("token", "reward", "advantage", "GRPO", "PPO", "policy", "ratio", "clip", "KL divergence",
             "reference model", "β (beta)", "log-probability", "chat template", "temperature", "seed", "sampling",
             "learning rate", "SGD", "gradient", "reward model", "Bradley–Terry", "sigmoid", "DPO", "byte piece",
             "optimizer step", "AdamW", "RLOO", "clip-higher", "CISPO", "standard deviation"),
    "distill": ("token", "distillation", "teacher model", "student model", "softmax", "logit", "forward KL",
                "KL divergence", "reverse KL", "JSD", "β (beta)", "temperature", "gradient",
                "temperature in distillation", "greedy decoding", "cross-entropy", "log-probability", "on-policy",
                "advantage", "SGD", "learning rate"),
    "batches": ("token", "label", "padding", "-100 / ignore_index", "chat template", "packing", "document mask"),
    "masked-lm": ("token", "label", "-100 / ignore_index", "WordPiece ##", "[CLS] / [SEP] / [MASK]", "seed"),
    "nsp": ("token", "logit", "softmax", "label", "cross-entropy", "[CLS] / [SEP] / [MASK]", "sigmoid",
            "binary cross-entropy"),
    "bert-loss": ("label", "[CLS] / [SEP] / [MASK]", "MLM weight / NSP weight"),
    "train": ("token", "nats", "perplexity", "unigram entropy", "entropy"),
    "bpb": ("token", "label", "log-probability", "nats", "perplexity", "UTF-8", "byte piece", "bits per byte",
            "byte perplexity", "word perplexity", "BOS / EOS", "context length", "window", "stride",
            "[CLS] / [SEP] / [MASK]"),
}


def anchor(term: str) -> str:
    """The term's anchor on the Glossary page: lower case, letters and digits joined by '-'."""
    return re.sub(r"[^a-z0-9]+", "-", term.lower()).strip("-") or "term"


def link(word: str, term: str, query: str = "") -> str:
    """Markdown for ``word`` linking to ``term``'s entry on the Glossary page, a path relative to the
    page's own (Streamlit opens it in a new tab; ``query``, e.g. "?present=1", carries settings there)."""
    if term not in TERMS:
        raise KeyError(f"{term!r} is not in the glossary.")
    shown = word.replace("[", "\\[").replace("]", "\\]")
    return f"[{shown}](glossary{query}#{anchor(term)})"


def uses(word: str) -> str:
    """A regular expression for ``word`` as a whole word ("label", not in "labelled"), any case if written in
    lower case. Only Latin letters: a lower-case Greek symbol is matched as written, since σ (sigmoid) in any case
    would be Σ (a sum)."""
    any_case = word.islower() and word.isascii()
    return rf"(?{'i' if any_case else ''}:(?<![\w\\-]){re.escape(word)}(?![\w-]))"


def link_first_uses(text: str, query: str = "") -> str:
    """Plain ``text`` with each term's first use linked (see ``link``): for lines written once for every page,
    such as the lesson path's, that come before the page's own words."""
    firsts = []
    for term, (words, _) in TERMS.items():
        found = [match for word in words for match in re.finditer(uses(word), text)]
        if found:
            firsts.append((min(found, key=lambda match: match.start()), term))
    pieces, done = [], 0
    for match, term in sorted(firsts, key=lambda first: (first[0].start(), -first[0].end())):
        if match.start() >= done:  # not inside a longer term linked just before
            pieces += [text[done:match.start()], link(match.group(), term, query)]
            done = match.end()
    return "".join(pieces) + text[done:]
