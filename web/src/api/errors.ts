// The error every failed API call becomes: the HTTP status and the server's
// stable error code, for pages to tell "not found" from "try again".
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}
