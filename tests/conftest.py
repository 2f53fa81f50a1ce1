"""Shared fixtures: tiny Hugging Face models built from configs, offline."""

import pytest
import torch
from transformers import BertConfig, BertForPreTraining, GPT2Config, GPT2LMHeadModel

TINY_VOCAB = 50


@pytest.fixture(scope="session")
def tiny_gpt2():
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=TINY_VOCAB, n_positions=64, n_embd=16, n_layer=2, n_head=2)
    return GPT2LMHeadModel(config).eval()


@pytest.fixture(scope="session")
def tiny_bert():
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=TINY_VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=64,
    )
    return BertForPreTraining(config).eval()
