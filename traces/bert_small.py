"""A small BERT-style encoder and its pretraining data, for traces/record_pytorch.py.

The model has the tensor kinds of the built-in table bert_base_uncased under the same names
(embeddings.{word,position,token_type}_embeddings, embeddings.LayerNorm, per layer
attention.self.{query,key,value}, attention.output.dense and LayerNorm, intermediate.dense,
output.dense and LayerNorm, pooler.dense), only smaller, plus BERT's two pretraining heads:
masked words through the word embeddings (tied; its own bias cls.predictions.bias) and the
next-half classifier on the pooler (cls.seq_relationship).

The text is Python's own documentation as the interpreter ships it (the pydoc_data.topics
module: the language reference's topics, about 65,000 words), so nothing is downloaded.
Words: lower-cased runs of letters, digits and underscores, and single punctuation marks;
the `vocab` most frequent kept, the rest [UNK]. A sample is [CLS] a [SEP] b [SEP] where a is
a span of the text and b the span after it, or (half the time) a span from elsewhere;
15% of the words are masked as BERT does (80% [MASK], 10% a random word, 10% kept).
"""
import re
from collections import Counter

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


class PydocPairs(torch.utils.data.Dataset):
    """(input, target): input [2, L] (word ids, segment ids); target [L + 1] (the masked words'
    ids, -100 elsewhere, then the next-half label: 1 if b follows a)."""

    def __init__(self, seq_len, vocab, seed, length=20000):
        import pydoc_data.topics
        text = " ".join(pydoc_data.topics.topics[k] for k in sorted(pydoc_data.topics.topics))
        words = re.findall(r"\w+|[^\w\s]", text.lower())
        common = [w for w, _ in Counter(words).most_common(vocab - len(SPECIALS))]
        self.vocab = SPECIALS + common
        index = {w: i for i, w in enumerate(self.vocab)}
        self.ids = np.array([index.get(w, 1) for w in words], np.int64)
        self.L, self.half, self.length = seq_len, (seq_len - 3) // 2, length
        self.rng = np.random.default_rng(seed)

    def __len__(self):
        return self.length

    def __getitem__(self, _):
        r, n, h = self.rng, len(self.ids), self.half
        at = int(r.integers(0, n - 2 * h))
        a = self.ids[at:at + h]
        follows = int(r.random() < 0.5)
        if follows:
            b = self.ids[at + h:at + 2 * h]
        else:
            other = int(r.integers(0, n - h))
            b = self.ids[other:other + h]
        tok = np.concatenate([[2], a, [3], b, [3]])
        seg = np.concatenate([np.zeros(h + 2, np.int64), np.ones(h + 1, np.int64)])
        pad = self.L - len(tok)
        tok = np.concatenate([tok, np.zeros(pad, np.int64)])
        seg = np.concatenate([seg, np.zeros(pad, np.int64)])
        target = np.full(self.L + 1, -100, np.int64)
        words = np.flatnonzero(tok >= len(SPECIALS))
        masked = words[r.random(len(words)) < 0.15]
        target[masked] = tok[masked]
        u = r.random(len(masked))
        tok[masked[u < 0.8]] = 4
        rand = masked[(u >= 0.8) & (u < 0.9)]
        tok[rand] = r.integers(len(SPECIALS), len(self.vocab), len(rand))
        target[self.L] = follows
        return torch.from_numpy(np.stack([tok, seg])), torch.from_numpy(target)


class _Dense(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.dense = nn.Linear(cin, cout)


class _SelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.heads = heads

    def forward(self, x, pad_mask):
        B, L, H = x.shape
        split = lambda t: t.view(B, L, self.heads, H // self.heads).transpose(1, 2)
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        att = (q @ k.transpose(-1, -2)) / (H // self.heads) ** 0.5
        att = att.masked_fill(pad_mask[:, None, None, :], float("-inf")).softmax(-1)
        return (att @ v).transpose(1, 2).reshape(B, L, H)


class _AttentionOutput(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)


class _Attention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.self = _SelfAttention(hidden, heads)
        self.output = _AttentionOutput(hidden)

    def forward(self, x, pad_mask):
        return self.output.LayerNorm(x + self.output.dense(self.self(x, pad_mask)))


class _Output(nn.Module):
    def __init__(self, inter, hidden):
        super().__init__()
        self.dense = nn.Linear(inter, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)


class _Layer(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.attention = _Attention(hidden, heads)
        self.intermediate = _Dense(hidden, 4 * hidden)
        self.output = _Output(4 * hidden, hidden)

    def forward(self, x, pad_mask):
        a = self.attention(x, pad_mask)
        return self.output.LayerNorm(a + self.output.dense(F.gelu(self.intermediate.dense(a))))


class _Embeddings(nn.Module):
    def __init__(self, vocab, hidden, max_len):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_len, hidden)
        self.token_type_embeddings = nn.Embedding(2, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)


class _Encoder(nn.Module):
    def __init__(self, hidden, layers, heads):
        super().__init__()
        self.layer = nn.ModuleList(_Layer(hidden, heads) for _ in range(layers))


class _Heads(nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.predictions = nn.Module()
        self.predictions.bias = nn.Parameter(torch.zeros(vocab))
        self.seq_relationship = nn.Linear(hidden, 2)


class BertSmall(nn.Module):
    def __init__(self, vocab, hidden, layers, heads, max_len):
        super().__init__()
        self.embeddings = _Embeddings(vocab, hidden, max_len)
        self.encoder = _Encoder(hidden, layers, heads)
        self.pooler = _Dense(hidden, hidden)
        self.cls = _Heads(vocab, hidden)
        for m in self.modules():  # BERT's initialisation: N(0, 0.02), zero biases
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def loss(self, x, target):
        tok, seg = x[:, 0], x[:, 1]
        e = self.embeddings
        pos = torch.arange(tok.shape[1])[None]
        h = e.LayerNorm(e.word_embeddings(tok) + e.position_embeddings(pos) +
                        e.token_type_embeddings(seg))
        for layer in self.encoder.layer:
            h = layer(h, tok == 0)
        pooled = torch.tanh(self.pooler.dense(h[:, 0]))
        nsp = F.cross_entropy(self.cls.seq_relationship(pooled), target[:, -1])
        sel = target[:, :-1] >= 0
        logits = h[sel] @ e.word_embeddings.weight.t() + self.cls.predictions.bias
        return F.cross_entropy(logits, target[:, :-1][sel]) + nsp
