"""DeepSurv-style Cox model: MLP log-risk per patient, partial likelihood over sorted batches."""
import math

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

SEED = 0
N_PATIENTS = 3000
BATCH = 256
EPOCHS = 20
LR = 1e-3
HIDDEN = 64
TRAIN_FRAC = 0.8


def make_cohort(n, rng):
    """Baseline covariates in clinical units, exponential event times, random censoring.

    Returns (covariates, follow-up time in months, censored flag) like the registry export.
    """
    age = rng.normal(62, 11, n)                      # years
    bmi = rng.normal(27, 4.5, n)                     # kg/m^2
    sbp = rng.normal(132, 18, n)                     # mmHg
    chol = rng.normal(205, 38, n)                    # mg/dL
    creat = rng.lognormal(0.0, 0.3, n)               # mg/dL
    crp = rng.lognormal(1.0, 0.8, n)                 # mg/L
    hb = rng.normal(13.5, 1.6, n)                    # g/dL
    ef = rng.normal(0.55, 0.09, n)                   # ejection fraction
    male = rng.binomial(1, 0.55, n).astype(float)
    smoker = rng.binomial(1, 0.25, n).astype(float)
    diabetic = rng.binomial(1, 0.2, n).astype(float)
    stage = rng.integers(1, 5, n).astype(float)      # tumour stage 1-4
    x = np.stack([age, bmi, sbp, chol, creat, crp, hb, ef, male, smoker, diabetic, stage], 1)

    z = (x - x.mean(0)) / x.std(0)
    log_hr = (0.7 * z[:, 0] + 0.4 * np.tanh(z[:, 1]) ** 2 + 0.3 * z[:, 2]
              + 0.8 * z[:, 4] * (z[:, 4] > 0) + 0.6 * np.log1p(np.exp(z[:, 5]))
              - 0.5 * z[:, 6] - 0.9 * z[:, 7] + 0.5 * z[:, 9] * (1 + z[:, 10])
              + 0.6 * (x[:, 11] - 1) + 0.4 * z[:, 0] * z[:, 7])
    t_event = rng.exponential(1.0 / (0.05 * np.exp(log_hr)))
    t_censor = rng.uniform(0, 10, n)
    time = np.minimum(t_event, t_censor)
    censored = (t_event > t_censor).astype(float)
    return x.astype(np.float32), time.astype(np.float32), censored.astype(np.float32)


class CoxMLP(nn.Module):
    def __init__(self, n_in, hidden):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_in, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(0.1),
            nn.Linear(hidden, hidden // 2), nn.BatchNorm1d(hidden // 2), nn.ReLU(),
            nn.Linear(hidden // 2, 1),
        )

    def forward(self, x):
        return self.net(x).squeeze(-1)


def cox_ph_loss(log_risk, time, event):
    """Negative Cox partial log-likelihood (Breslow, no ties) averaged over events."""
    order = torch.argsort(time, descending=True)
    log_risk, event = log_risk[order], event[order]
    log_cum_hazard = torch.logcumsumexp(log_risk, dim=0)   # risk set: all with time >= t_i
    return -((log_risk - log_cum_hazard) * event).sum() / event.sum().clamp(min=1.0)


def follow_up_summary(time, event):
    """Median follow-up (months) and event rate, for the cohort table."""
    t = np.sort(time)
    return t[len(t) // 2], event.mean()


def concordance(risk, time, event):
    risk, time, event = risk.numpy(), time.numpy(), event.numpy()
    num = den = 0.0
    for i in np.where(event == 1)[0]:
        later = time > time[i]
        num += (risk[i] > risk[later]).sum() + 0.5 * (risk[i] == risk[later]).sum()
        den += later.sum()
    return num / den


def main():
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    x, time, censored = make_cohort(N_PATIENTS, rng)
    event = 1.0 - censored
    median_fu, event_rate = follow_up_summary(time, event)
    print(f"patients {len(x)} median follow-up {median_fu:.1f} months events {event_rate:.0%}")
    split = int(TRAIN_FRAC * N_PATIENTS)
    mean, std = x[:split].mean(0), x[:split].std(0)
    x_std = (x - mean) / std

    x_tr, t_tr, e_tr = (torch.from_numpy(a[:split]) for a in (x_std, time, event))
    x_va, t_va, e_va = (torch.from_numpy(a[split:]) for a in (x_std, time, event))
    loader = DataLoader(TensorDataset(x_tr, t_tr, e_tr), batch_size=BATCH, shuffle=True,
                        drop_last=True)

    model = CoxMLP(x.shape[1], HIDDEN)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    losses = []
    for epoch in range(EPOCHS):
        model.train()
        for xb, tb, eb in loader:
            loss = cox_ph_loss(model(xb), tb, eb)
            loss.backward()
            optimizer.zero_grad()
            optimizer.step()
            losses.append(loss.item())
        if epoch % 5 == 4 or epoch == EPOCHS - 1:
            model.eval()
            with torch.no_grad():
                risk_va = model(x_va)
                val = cox_ph_loss(risk_va, t_va, e_va).item()
            print(f"epoch {epoch} train {np.mean(losses[-len(loader):]):.4f} val {val:.4f} "
                  f"c-index {concordance(risk_va, t_va, e_va):.3f}")

    def fmt(v):
        return f"{v:.4f}" if math.isfinite(v) else "nan"
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")


if __name__ == "__main__":
    main()
