# %% [markdown]
# #### 4.6　测量：预算、TTFT 与 TBT（建设中）
