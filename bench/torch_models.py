"""The seed models in PyTorch, shared by the peer scripts (torch_train.py,
torch_step.py). Each matches its ngen declaration in models/: layer sizes,
PyTorch's default initialisation, Adam(lr 1e-3) and cross-entropy.
"""


def mlp(layers, dropout=0.0):
    """Linear layers with ReLU (and dropout, when > 0) between them."""
    import torch.nn as nn
    mods = []
    for i in range(len(layers) - 1):
        mods.append(nn.Linear(layers[i], layers[i + 1]))
        if i < len(layers) - 2:
            mods.append(nn.ReLU())
            if dropout > 0:
                mods.append(nn.Dropout(dropout))
    return nn.Sequential(*mods)


def convnet(bn=False):
    """The seed ConvNet for 1x28x28 input (models/convnet): conv 32 3x3 pad 1,
    ReLU, maxpool 2, conv 64 3x3 pad 1, ReLU, maxpool 2, fc 128, ReLU, fc 10;
    with bn, BatchNorm2d after each conv."""
    import torch.nn as nn

    def block(cin, cout):
        mods = [nn.Conv2d(cin, cout, 3, padding=1)]
        if bn:
            mods.append(nn.BatchNorm2d(cout))
        return mods + [nn.ReLU(), nn.MaxPool2d(2)]

    return nn.Sequential(*block(1, 32), *block(32, 64), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def build(name, layers=None, dropout=0.0):
    """A model by the name ngen's train command uses, and its input shape
    per sample."""
    if name == "mlp":
        return mlp(layers or [784, 512, 256, 10], dropout), (layers or [784])[0:1]
    if name == "mlpbench":
        return mlp(layers or [1024, 2048, 512, 10]), [(layers or [1024])[0]]
    if name in ("convnet", "convnet_bn"):
        return convnet(bn=name == "convnet_bn"), [1, 28, 28]
    raise SystemExit("unknown model %r (have mlp, mlpbench, convnet, convnet_bn)" % name)


def seq_model(name, vocab):
    """The seed sequence models (models/rnn, models/lstm) as the training
    command runs them: (module, Adam learning rate).

    rnn: Embedding(vocab, 32) -> RNN(32, 128, tanh, batch_first) -> the last
    real step's hidden state -> Linear(128, 5). Words come left-padded with
    a 0/1 mask; ngen carries the state over padded steps, which from zero
    states equals running the real tokens only: here the words are packed
    (pack_padded_sequence) after moving the padding to the right.

    lstm: CharLM, Embedding(vocab, 32) -> LSTM(32, 128, num_layers=2,
    batch_first) -> Linear(128, vocab) at every position."""
    import torch
    import torch.nn as nn

    class RNNClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, 32)
            self.rnn = nn.RNN(32, 128, batch_first=True)
            self.fc = nn.Linear(128, 5)

        def forward(self, x, lengths):
            T = x.shape[1]
            # Left padding to right padding: row r's tokens start at T-len.
            idx = (torch.arange(T)[None, :] + (T - lengths)[:, None]) % T
            x = torch.gather(x, 1, idx)
            packed = nn.utils.rnn.pack_padded_sequence(self.emb(x), lengths.cpu(), batch_first=True, enforce_sorted=False)
            _, hn = self.rnn(packed)
            return self.fc(hn[-1])

    if name == "rnn":
        return RNNClassifier(), 1e-3
    if name == "lstm":
        return char_lm(vocab, 32, 128), 2e-3
    if name == "lstmbench":
        return char_lm(vocab, 128, 256), 2e-3
    raise SystemExit("unknown sequence model %r (have rnn, lstm)" % name)


def char_lm(vocab, emb, hidden):
    """CharLM of models/lstm: Embedding(vocab, emb) -> LSTM(emb, hidden,
    num_layers=2, batch_first) -> Linear(hidden, vocab) at every position."""
    import torch.nn as nn

    class CharLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, emb)
            self.lstm = nn.LSTM(emb, hidden, num_layers=2, batch_first=True)
            self.fc = nn.Linear(hidden, vocab)

        def forward(self, x, lengths=None):
            out, _ = self.lstm(self.emb(x))
            return self.fc(out)

    return CharLM()
