// Progressive enhancement only: every page works without this file.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const field = document.getElementById(button.dataset.copy);
  const status = document.getElementById("copy-status");
  try {
    await navigator.clipboard.writeText(field.value);
    if (status) status.textContent = "Copied to the clipboard.";
  } catch {
    field.select();
    if (status) status.textContent = "Selected: press Ctrl+C (or ⌘C) to copy.";
  }
});
